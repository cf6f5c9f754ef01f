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
case "$1 $2" in
"server "*)
	mkdir -p /tmp/www/api && echo ok >/tmp/www/api/health
	echo "graphhub $version: serving on port ${4:-8000}"
	exec httpd -f -p "${4:-8000}" -h /tmp/www ;;
"worker "*)
	echo "graphhub $version: worker started"
	exec sleep 2147483647 ;;
"db init")
	echo "graphhub $version: database schema initialised at $version" ;;
"db migrate")
	echo "graphhub $version: database schema migrated from $version to the next release" ;;
"maintenance on")
	date -u +%FT%TZ >/tmp/maintenance
	echo "graphhub $version: maintenance mode on (API read-only since $(cat /tmp/maintenance))" ;;
"maintenance off")
	if [ -f /tmp/maintenance ]; then since="$(cat /tmp/maintenance)"; rm -f /tmp/maintenance; else since="never (a new pod)"; fi
	echo "graphhub $version: maintenance mode off (was on since $since)" ;;
*)
	echo "graphhub $version: unknown command: $*" >&2
	exit 2 ;;
esac
`

// serviceScript stands in for the database and the cache: it listens on
// the port the chart probes and ignores the server's own arguments.
const serviceScript = `#!/bin/sh
echo "listening on port $1"
exec httpd -f -p "$1" -h /tmp
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
