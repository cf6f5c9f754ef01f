package gitsource

import (
	"bytes"
	"compress/zlib"
	"crypto/sha1"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/storage/memory"
)

// storePack writes pack into a boundedStorage of max bytes as a fetch
// does (PackfileWriter, then Close).
func storePack(t *testing.T, pack []byte, max int64) (*boundedStorage, error) {
	t.Helper()
	s := &boundedStorage{Storage: memory.NewStorage(), url: "https://git.example.com/drivers.git", max: max}
	w, err := s.PackfileWriter()
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.Copy(w, bytes.NewReader(pack))
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	return s, err
}

// TestBoundedStorageStoresWhatGoGitPacksWithEitherKindOfDelta: versions
// of a file packed with deltas against each other, as offsets and as
// hashes (whose base may come later in the pack), are stored with the
// content and hash they were packed with.
func TestBoundedStorageStoresWhatGoGitPacksWithEitherKindOfDelta(t *testing.T) {
	src := memory.NewStorage()
	var hashes []plumbing.Hash
	want := map[plumbing.Hash]string{}
	text := strings.Repeat("line of a chart template\n", 400)
	for i := range 12 {
		text = strings.Replace(text, "line", fmt.Sprintf("l%02d", i), 3)
		o := src.NewEncodedObject()
		o.SetType(plumbing.BlobObject)
		w, _ := o.Writer()
		_, _ = io.WriteString(w, text)
		_ = w.Close()
		h, err := src.SetEncodedObject(o)
		if err != nil {
			t.Fatal(err)
		}
		hashes = append(hashes, h)
		want[h] = text
	}
	for _, refDeltas := range []bool{false, true} {
		var pack bytes.Buffer
		if _, err := packfile.NewEncoder(&pack, src, refDeltas).Encode(hashes, 10); err != nil {
			t.Fatal(err)
		}
		if pack.Len() > len(text)*3 {
			t.Fatalf("the pack of 12 versions is %d bytes: no deltas to test", pack.Len())
		}
		s, err := storePack(t, pack.Bytes(), 1<<20)
		if err != nil {
			t.Fatalf("ref deltas %v: %v", refDeltas, err)
		}
		for h, text := range want {
			o, err := s.EncodedObject(plumbing.BlobObject, h)
			if err != nil {
				t.Fatalf("ref deltas %v: %s: %v", refDeltas, h, err)
			}
			r, _ := o.Reader()
			got, _ := io.ReadAll(r)
			if string(got) != text || o.Hash() != h {
				t.Fatalf("ref deltas %v: %s holds other content", refDeltas, h)
			}
		}
		// Each of the 12 versions is 10 KB: 120 KB do not fit in 100.
		if _, err := storePack(t, pack.Bytes(), 100_000); !errors.As(err, new(*FetchLimitError)) {
			t.Fatalf("ref deltas %v: 120 KB stored within 100 KB: %v", refDeltas, err)
		}
	}
}

// TestADeltaThatWouldInflateToGigabytesIsRefusedFromItsHeader: a pack of
// a few hundred bytes whose delta says it makes 4 GiB out of a 1 KB base
// is refused before anything is applied.
func TestADeltaThatWouldInflateToGigabytesIsRefusedFromItsHeader(t *testing.T) {
	var pack bytes.Buffer
	pack.WriteString("PACK")
	_ = binary.Write(&pack, binary.BigEndian, uint32(2))
	_ = binary.Write(&pack, binary.BigEndian, uint32(2))
	base := bytes.Repeat([]byte("x"), 1000)
	baseAt := pack.Len()
	writeObject(&pack, 3 /* blob */, base)
	// The delta: the base's size, 4 GiB, then copies of the whole base.
	d := binary.AppendUvarint(nil, uint64(len(base)))
	d = binary.AppendUvarint(d, 4<<30)
	for range 100 {
		d = append(d, 0x80|0x10|0x20, 0xe8, 0x03) // copy 1000 bytes from offset 0
	}
	deltaAt := pack.Len()
	writeHeader(&pack, 6 /* ofs delta */, len(d))
	pack.WriteByte(byte(deltaAt - baseAt)) // one byte: under 128
	writeZlib(&pack, d)
	sum := sha1.Sum(pack.Bytes())
	pack.Write(sum[:])
	if pack.Len() > 1000 {
		t.Fatalf("the pack is %d bytes", pack.Len())
	}
	_, err := storePack(t, pack.Bytes(), DefaultMaxFetchBytes)
	var limit *FetchLimitError
	if !errors.As(err, &limit) || !strings.Contains(err.Error(), "git.example.com/drivers.git") || !strings.Contains(err.Error(), "32 MiB") {
		t.Fatalf("a 4 GiB delta: %v", err)
	}
}

// TestARefDeltaBeforeItsBaseIsAppliedOnceTheBaseIsStored: a delta naming
// its base by hash may come before it in a pack; one whose base never
// comes is an error.
func TestARefDeltaBeforeItsBaseIsAppliedOnceTheBaseIsStored(t *testing.T) {
	base := bytes.Repeat([]byte("x"), 1000)
	baseHash := plumbing.ComputeHash(plumbing.BlobObject, base)
	want := append(bytes.Repeat([]byte("x"), 500), "hello"...)
	d := binary.AppendUvarint(nil, uint64(len(base)))
	d = binary.AppendUvarint(d, uint64(len(want)))
	d = append(d, 0x80|0x10|0x20, 0xf4, 0x01) // copy 500 bytes from offset 0
	d = append(d, 5)
	d = append(d, "hello"...)
	build := func(withBase bool) []byte {
		var pack bytes.Buffer
		pack.WriteString("PACK")
		_ = binary.Write(&pack, binary.BigEndian, uint32(2))
		n := uint32(1)
		if withBase {
			n = 2
		}
		_ = binary.Write(&pack, binary.BigEndian, n)
		writeHeader(&pack, 7 /* ref delta */, len(d))
		pack.Write(baseHash[:])
		writeZlib(&pack, d)
		if withBase {
			writeObject(&pack, 3, base)
		}
		sum := sha1.Sum(pack.Bytes())
		pack.Write(sum[:])
		return pack.Bytes()
	}
	s, err := storePack(t, build(true), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	o, err := s.EncodedObject(plumbing.BlobObject, plumbing.ComputeHash(plumbing.BlobObject, want))
	if err != nil {
		t.Fatalf("the delta's object: %v", err)
	}
	r, _ := o.Reader()
	if got, _ := io.ReadAll(r); !bytes.Equal(got, want) {
		t.Fatalf("the delta made %q", got)
	}
	if _, err := storePack(t, build(false), 1<<20); !errors.Is(err, packfile.ErrMalformedPackFile) {
		t.Fatalf("a delta without its base: %v", err)
	}
}

func writeObject(w *bytes.Buffer, typ byte, data []byte) {
	writeHeader(w, typ, len(data))
	writeZlib(w, data)
}

// writeHeader writes a pack object header: type and size, 4 bits then
// 7 at a time.
func writeHeader(w *bytes.Buffer, typ byte, size int) {
	b := typ<<4 | byte(size&0x0f)
	size >>= 4
	for size > 0 {
		w.WriteByte(b | 0x80)
		b = byte(size & 0x7f)
		size >>= 7
	}
	w.WriteByte(b)
}

func writeZlib(w *bytes.Buffer, data []byte) {
	z := zlib.NewWriter(w)
	_, _ = z.Write(data)
	_ = z.Close()
}

// TestACommitNoRefPointsAtIsAskedByHashThenSoughtDeeperInHeadThenAllBranchesThenTags:
// the order of the fetches for a commit hash no ref points at, each
// branch set deeper and deeper; with one branch, HEAD's is every branch.
func TestACommitNoRefPointsAtIsAskedByHashThenSoughtDeeperInHeadThenAllBranchesThenTags(t *testing.T) {
	rev := strings.Repeat("a", 40)
	refs := []*plumbing.Reference{
		plumbing.NewSymbolicReference(plumbing.HEAD, "refs/heads/main"),
		plumbing.NewReferenceFromStrings("refs/heads/main", strings.Repeat("b", 40)),
		plumbing.NewReferenceFromStrings("refs/heads/gh-pages", strings.Repeat("c", 40)),
	}
	describe := func(specs []fetchSpec) string {
		var out []string
		for _, s := range specs {
			out = append(out, fmt.Sprintf("%s@%d", s.refSpecs[0], s.depth))
		}
		return strings.Join(out, " ")
	}
	want := rev + ":refs/remotes/origin/wanted@1" +
		" +refs/heads/main:refs/remotes/origin/main@50 +refs/heads/main:refs/remotes/origin/main@500 +refs/heads/main:refs/remotes/origin/main@0" +
		" +refs/heads/*:refs/remotes/origin/*@50 +refs/heads/*:refs/remotes/origin/*@500 +refs/heads/*:refs/remotes/origin/*@0" +
		" +refs/tags/*:refs/tags/*@0"
	if got := describe(fetchSpecs(refs, rev)); got != want {
		t.Fatalf("fetches:\n%s\nwant\n%s", got, want)
	}
	want = rev + ":refs/remotes/origin/wanted@1" +
		" +refs/heads/main:refs/remotes/origin/main@50 +refs/heads/main:refs/remotes/origin/main@500 +refs/heads/main:refs/remotes/origin/main@0" +
		" +refs/tags/*:refs/tags/*@0"
	if got := describe(fetchSpecs(refs[:2], rev)); got != want {
		t.Fatalf("fetches with one branch:\n%s\nwant\n%s", got, want)
	}
}
