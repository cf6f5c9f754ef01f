package main

import "github.com/styrmin/styrmin/testcluster"

// graphhubVersions are the application versions of graphhub the demo runs
// on the real node (its driver takes the image tag from the version).
var graphhubVersions = []string{"1.4.0", "1.4.1", "1.5.0"}

// graphhubScript stands in for graphhub's command line in the demo's
// images: the server answers its readiness probe, the workers wait, the
// database and maintenance commands say what they did and keep it in the
// container (maintenance mode is a file the server's pod keeps).
const graphhubScript = `#!/bin/sh
version="$(cat /etc/graphhub-version)"
# As a container's first process the shell ignores SIGTERM unless it traps
# it: without the trap every stop would wait out the grace period.
serve() {
	trap 'kill "$child" 2>/dev/null; exit 0' TERM INT
	"$@" & child=$!
	wait "$child"
}
case "$1 $2" in
"server "*)
	# graphhub server --port PORT
	mkdir -p /tmp/www/api && echo ok >/tmp/www/api/health
	echo "graphhub $version: serving on port ${3:-8000}"
	serve httpd -f -p "${3:-8000}" -h /tmp/www ;;
"worker "*)
	echo "graphhub $version: worker started"
	serve sleep 2147483647 ;;
"db init")
	echo "graphhub $version: database schema created at $version" ;;
"db migrate")
	echo "graphhub $version: database schema migrated to $version" ;;
"maintenance on")
	date -u +%FT%TZ >/tmp/maintenance
	echo "graphhub $version: maintenance mode on, API read-only (pod $(hostname))" ;;
"maintenance off")
	rm -f /tmp/maintenance
	echo "graphhub $version: maintenance mode off, API read-write (pod $(hostname))" ;;
*)
	echo "graphhub $version: unknown command: $*" >&2
	exit 2 ;;
esac
`

// serviceScript stands in for the database and the cache: it listens on
// the port the chart probes and ignores the server's own arguments.
const serviceScript = `#!/bin/sh
trap 'kill "$child" 2>/dev/null; exit 0' TERM INT
echo "listening on port $1"
httpd -f -p "$1" -h /tmp & child=$!
wait "$child"
`

// demoImages are the images of graphhub (server and workers, database,
// cache) under the names its driver's chart gives them, so that `make
// demo` can move a graphhub deployment onto the real node.
func demoImages() []testcluster.Image {
	var images []testcluster.Image
	for _, v := range graphhubVersions {
		images = append(images, testcluster.Image{
			Name:  "docker.io/library/busybox:" + v,
			Cmd:   []string{"/bin/sh"},
			Files: map[string]string{"/bin/graphhub": graphhubScript, "/etc/graphhub-version": v + "\n"},
		})
	}
	return append(images,
		testcluster.Image{
			Name:       "docker.io/library/postgres:16-alpine",
			Entrypoint: []string{"/bin/fake-service", "5432"},
			Files:      map[string]string{"/bin/fake-service": serviceScript, "/bin/pg_isready": "#!/bin/sh\nexit 0\n"},
		},
		testcluster.Image{
			Name:       "docker.io/library/redis:7-alpine",
			Entrypoint: []string{"/bin/fake-service", "6379"},
			Files:      map[string]string{"/bin/fake-service": serviceScript},
		},
	)
}
