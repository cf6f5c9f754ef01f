package webhook

import (
	"container/list"
	"sync"
	"time"
)

// slots bounds the requests read and verified at once. When every slot is
// taken, a new request may cut off the oldest one that has been reading
// for longer than slowAfter: GitHub sends a delivery in milliseconds, so
// such a request is a slow (or stalled) sender, and without this a few
// dozen of them would keep every genuine push out until they time out.
type slots struct {
	mu    sync.Mutex
	max   int
	inUse map[*slot]struct{}
}

type slot struct {
	start time.Time
	abort func()
}

func newSlots(max int) *slots {
	return &slots{max: max, inUse: map[*slot]struct{}{}}
}

// acquire takes a slot for a request started at now; abort cuts that
// request off should a later one evict it. It returns the release, or
// false when every slot is held by a request younger than slowAfter.
func (s *slots) acquire(now time.Time, slowAfter time.Duration, abort func()) (func(), bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.inUse) >= s.max {
		var oldest *slot
		for sl := range s.inUse {
			if now.Sub(sl.start) >= slowAfter && (oldest == nil || sl.start.Before(oldest.start)) {
				oldest = sl
			}
		}
		if oldest == nil {
			return nil, false
		}
		// The evicted request's read fails at once and it ends; it stops
		// counting now, so the bound is exceeded only by requests that
		// are already letting go of their buffers.
		delete(s.inUse, oldest)
		oldest.abort()
	}
	sl := &slot{start: now, abort: abort}
	s.inUse[sl] = struct{}{}
	return func() {
		s.mu.Lock()
		delete(s.inUse, sl)
		s.mu.Unlock()
	}, true
}

// deliveryOverhead approximates the memory of one remembered delivery
// beyond its id: the hash, the time, two map entries and a list element.
const deliveryOverhead = 160

// deliveries remembers verified deliveries by id and by body hash for a
// time window, within a byte budget (the oldest go first). The signature
// covers the body but not the X-GitHub-Delivery header, so a capture can
// be replayed under a new id: the hash catches that.
type deliveries struct {
	mu       sync.Mutex
	window   time.Duration
	maxBytes int
	bytes    int
	order    *list.List // of *delivery, oldest first
	byID     map[string]*list.Element
	bySum    map[[32]byte]*list.Element
}

type delivery struct {
	id  string
	sum [32]byte
	at  time.Time
}

func (d *delivery) size() int { return len(d.id) + deliveryOverhead }

func newDeliveries(window time.Duration, maxBytes int) *deliveries {
	return &deliveries{window: window, maxBytes: maxBytes, order: list.New(),
		byID: map[string]*list.Element{}, bySum: map[[32]byte]*list.Element{}}
}

// add records a delivery at now; for a replay it records nothing and
// says what was replayed.
func (d *deliveries) add(id string, sum [32]byte, now time.Time) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	for e := d.order.Front(); e != nil && now.Sub(e.Value.(*delivery).at) > d.window; e = d.order.Front() {
		d.remove(e)
	}
	if _, ok := d.byID[id]; ok {
		return "same delivery id"
	}
	if _, ok := d.bySum[sum]; ok {
		return "same body under another delivery id"
	}
	v := &delivery{id: id, sum: sum, at: now}
	for d.bytes+v.size() > d.maxBytes && d.order.Len() > 0 {
		d.remove(d.order.Front())
	}
	e := d.order.PushBack(v)
	d.byID[id], d.bySum[sum] = e, e
	d.bytes += v.size()
	return ""
}

// forget drops a delivery recorded by add (one that then failed), so its
// redelivery is accepted.
func (d *deliveries) forget(id string, sum [32]byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if e, ok := d.byID[id]; ok && e.Value.(*delivery).sum == sum {
		d.remove(e)
	}
}

func (d *deliveries) remove(e *list.Element) {
	v := d.order.Remove(e).(*delivery)
	delete(d.byID, v.id)
	delete(d.bySum, v.sum)
	d.bytes -= v.size()
}

// len is how many deliveries are remembered (tests).
func (d *deliveries) len() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.order.Len()
}
