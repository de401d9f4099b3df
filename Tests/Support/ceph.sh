#!/bin/bash
# A real S3 server for tests: single-node Ceph (one mon, one memstore OSD, radosgw), auth none,
# everything under $D, on 127.0.0.1. Facts and pitfalls: ../shared/notes/s3-ceph.md.
#   D=<folder> RGW_PORT=<port> MON_PORT=<port> bash ceph.sh up     start; user TESTKEY/TESTSECRET, bucket "tiles"
#       (MEMSTORE_BYTES: the OSD's capacity in bytes, default 2 GiB; memstore holds everything in RAM)
#   D=<folder> bash ceph.sh down                                    stop by pid (rgw, osd, mon), then remove $D
# Every wait is bounded; `up` exits non-zero with the tail of the logs when a step does not come up.
set -euo pipefail
# The daemons fork into the background: they must not keep the caller's descriptors open (a test
# runner watching a pipe or socket for this script's end would wait for them). Not 0-2, and not
# 255: bash reads this script through it (close-on-exec, so no daemon inherits it; closed, bash
# stops at its next read of the script, past the first 4,096 bytes). No redirection on the loop:
# bash would keep stderr in a spare descriptor during it, which the loop closes, and every
# message after it (why `up` failed) was lost.
for f in /proc/$$/fd/*; do
    f=${f##*/}
    case $f in 0|1|2|255|*[!0-9]*) continue ;; esac
    eval "exec $f>&-"
done
D=${D:?set D to a fresh folder}
cmd=${1:?up or down}
C="-c $D/ceph.conf"

fail() { echo "ceph.sh: $*" >&2; tail -n 20 "$D"/log/*.log >&2 2>/dev/null || true; exit 1; }
# Any other step that fails (a daemon that cannot bind its port exits 1 and says why only in its
# log) names itself and shows the logs, instead of `set -e` ending the script without a word.
trap 'fail "line $LINENO: \"$BASH_COMMAND\" exited $?"' ERR
wait_for() { # seconds, description, command...
    local n=$(( $1 * 5 )) what=$2; shift 2
    for _ in $(seq "$n"); do "$@" >/dev/null 2>&1 && return 0; sleep 0.2; done
    fail "timed out waiting for $what"
}

if [ "$cmd" = down ]; then
    for n in client.rgw.x osd.0 mon.a; do
        f=$D/run/$n.pid; [ -f "$f" ] || continue; p=$(cat "$f")
        kill -TERM "$p" 2>/dev/null || continue
        for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$p" 2>/dev/null || true
    done
    rm -rf "$D"
    exit 0
fi

RGW_PORT=${RGW_PORT:?} MON_PORT=${MON_PORT:?}
mkdir -p "$D"/{run,log,mon.a,osd.0,rgw}
FSID=$(cat /proc/sys/kernel/random/uuid)
cat > "$D/ceph.conf" <<CONF
[global]
fsid = $FSID
mon host = v2:127.0.0.1:$MON_PORT
auth cluster required = none
auth service required = none
auth client required = none
run dir = $D/run
admin socket = $D/run/\$cluster-\$name.asok
log file = $D/log/\$name.log
pid file = $D/run/\$name.pid
ms bind ipv4 = true
ms bind ipv6 = false
osd pool default size = 1
osd pool default min size = 1
mon allow pool size one = true
mon warn on pool no redundancy = false
osd pool default pg autoscale mode = off
osd pool default pg num = 8
osd pool default pgp num = 8
mon max pg per osd = 1000
osd crush chooseleaf type = 0
mon data avail warn = 1
mon data avail crit = 0
[mon]
mon data = $D/mon.\$id
mon cluster log file = $D/log/cluster.log
[osd]
osd data = $D/osd.\$id
osd objectstore = memstore
memstore device bytes = ${MEMSTORE_BYTES:-2147483648}
[client.rgw.x]
rgw frontends = beast endpoint=127.0.0.1:$RGW_PORT tcp_nodelay=1
rgw data = $D/rgw
rgw dns name = localhost
# radosgw's default secure mon client mode cannot work with auth none (it hangs 300 s).
ms mon client mode = crc
CONF
monmaptool --create --fsid "$FSID" --addv a "[v2:127.0.0.1:$MON_PORT]" "$D/monmap" >/dev/null
ceph-mon $C --mkfs -i a --monmap "$D/monmap"
ceph-mon $C -i a
wait_for 30 "the mon" ceph $C --connect-timeout 2 mon stat
OSDUUID=$(cat /proc/sys/kernel/random/uuid)
ID=$(ceph $C osd new "$OSDUUID")
ceph-osd $C -i "$ID" --mkfs --osd-uuid "$OSDUUID" >/dev/null 2>&1 || fail "osd mkfs"
ceph-osd $C -i "$ID"
wait_for 60 "the osd" bash -c "ceph $C osd dump 2>/dev/null | grep -q '^osd.$ID up'"
radosgw $C -n client.rgw.x --rados-mon-op-timeout 30 --client-mount-timeout 30
wait_for 60 "radosgw" curl -s -o /dev/null "http://127.0.0.1:$RGW_PORT/"
radosgw-admin $C user create --uid=test --display-name=test --access-key=TESTKEY --secret=TESTSECRET >/dev/null
EMPTY=e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855
wait_for 30 "the bucket" curl -sf --aws-sigv4 aws:amz:us-east-1:s3 --user TESTKEY:TESTSECRET \
    -H "x-amz-content-sha256: $EMPTY" -X PUT "http://127.0.0.1:$RGW_PORT/tiles"
echo "ceph.sh: radosgw on 127.0.0.1:$RGW_PORT, bucket tiles"
