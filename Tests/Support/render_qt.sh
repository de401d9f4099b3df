#!/usr/bin/env bash
# Renders a map with a real MapLibre-family client: Qt Location's "mapboxgl" plugin (a
# mapbox-gl-native fork, offline database schema v6) in qmlscene under Xvfb, screenshot by
# ImageMagick `import`.
#
# Usage: render_qt.sh DB STYLE_URL LAT LON ZOOM OUT.png [SECONDS]
#   DB        MapLibre offline database. It is COPIED into a fresh temp dir as mapboxgl.db (the
#             plugin writes to it, and deletes a file whose user_version it does not know).
#             "" or "-" = no database (empty cache: online mode).
#   STYLE_URL style URL (mapboxgl.mapping.additional_style_urls; the map uses supportedMapTypes[0]).
#   SECONDS   wait before the screenshot (default 15). Everything is killed after SECONDS+30 s.
# Needs: qmlscene, qml-module-qtlocation/-qtpositioning/-qtquick2/-qtquick-window2,
#        libqt5location5-plugin-mapboxgl, xvfb (xvfb-run), imagemagick (import).
# Env:   RENDER_QT_KEEP=1 keeps the temp dir (its path is printed on stderr) with the QML file,
#        qmlscene.log and the cache dir as the plugin left it.
# Prints qmlscene's output on stderr: with the origin down, every resource missing from DB shows
# as "Failed to load tile z/x/y ..." / "Failed to load sprite|source|glyph range ..." / "loading
# style failed". Exit: 0 = OUT.png written; 1 = no screenshot (timeout, crash, import failure);
# 2 = bad usage or missing tools. Judge the picture with image_flat.sh.
# Observed (Debian 12, Qt 5.15.8): Qt zoomLevel Z loads vector tiles of zoom Z-2, plus Z-6
# (prefetch); a tile missing from DB is fetched from the network, then its parents down to z0;
# DB rows with expires NULL are used but re-requested; a user_version 7 DB is deleted.
set -u
if [ $# -lt 6 ] || [ $# -gt 7 ]; then
  sed -n '2,22p' "$0" >&2; exit 2
fi
db=$1 style=$2 lat=$3 lon=$4 zoom=$5 out=$6 secs=${7:-15}
for t in qmlscene xvfb-run import timeout; do
  command -v "$t" >/dev/null || { echo "render_qt.sh: $t not found" >&2; exit 2; }
done
num='^-?[0-9]+([.][0-9]+)?$'
for v in "$lat" "$lon" "$zoom" "$secs"; do
  [[ $v =~ $num ]] || { echo "render_qt.sh: not a number: $v" >&2; exit 2; }
done
[[ $secs != -* ]] || { echo "render_qt.sh: SECONDS must be positive" >&2; exit 2; }
if [ -n "$db" ] && [ "$db" != "-" ] && [ ! -f "$db" ]; then
  echo "render_qt.sh: no such database: $db" >&2; exit 2
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/render_qt.XXXXXX")
if [ "${RENDER_QT_KEEP:-}" = 1 ]; then echo "render_qt.sh: keeping $work" >&2
else trap 'rm -rf "$work"' EXIT; fi
mkdir "$work/cache"
if [ -n "$db" ] && [ "$db" != "-" ]; then cp "$db" "$work/cache/mapboxgl.db" || exit 1; fi
rm -f "$out"

# JSON string literals are valid QML string literals.
jstr() { /usr/bin/python3 -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$1"; }
cat > "$work/map.qml" <<QML
import QtQuick 2.0
import QtQuick.Window 2.0
import QtLocation 5.6
import QtPositioning 5.6
Window {
    x: 0; y: 0; width: 800; height: 600; visible: true; flags: Qt.FramelessWindowHint
    Map {
        anchors.fill: parent
        plugin: Plugin {
            name: "mapboxgl"
            PluginParameter { name: "mapboxgl.mapping.cache.directory"; value: $(jstr "$work/cache") }
            PluginParameter { name: "mapboxgl.mapping.additional_style_urls"; value: $(jstr "$style") }
        }
        activeMapType: supportedMapTypes[0]
        center: QtPositioning.coordinate($lat, $lon)
        zoomLevel: $zoom
    }
    // Backstop: quit on its own some time after the screenshot should have been taken.
    Timer { interval: ($secs + 10) * 1000; running: true; onTriggered: Qt.quit() }
}
QML

# Inside the X session: start qmlscene, wait, screenshot, stop qmlscene.
# `timeout` kills its whole process group (xvfb-run, Xvfb, qmlscene) when the hard limit passes.
inner='
  qmlscene "$1" >"$2" 2>&1 & q=$!
  sleep "$3"
  if kill -0 $q 2>/dev/null; then import -window root "$4"; rc=$?; else echo "qmlscene exited early" >&2; rc=1; fi
  kill $q 2>/dev/null
  for _ in $(seq 30); do kill -0 $q 2>/dev/null || break; sleep 0.1; done
  kill -KILL $q 2>/dev/null; wait $q 2>/dev/null
  exit $rc'
start=$EPOCHREALTIME
# TMPDIR: xvfb-run's Xauthority dir goes into $work too (a killed xvfb-run leaves it behind).
TMPDIR=$work timeout -k 5 "$(( ${secs%.*} + 30 ))" \
  xvfb-run -a -s "-screen 0 800x600x24" bash -c "$inner" render-inner \
    "$work/map.qml" "$work/qmlscene.log" "$secs" "$work/shot.png" </dev/null &
group=$!   # timeout leads its own process group
# Waits up to 5 s for the group to empty (xvfb-run signals Xvfb but does not wait), then kills it.
reap() { for _ in $(seq 50); do kill -0 -- -"$group" 2>/dev/null || return; sleep 0.1; done
         kill -KILL -- -"$group" 2>/dev/null; }
trap 'kill -TERM -- -"$group" 2>/dev/null; reap; exit 143' TERM INT HUP
wait $group; rc=$?
reap
# Only a complete screenshot becomes OUT.png (import killed mid-write leaves a partial file).
if [ "$rc" = 0 ] && [ -s "$work/shot.png" ]; then cp "$work/shot.png" "$out" || exit 1; fi
sed 's/^/qmlscene: /' "$work/qmlscene.log" >&2 2>/dev/null
awk -v rc="$rc" -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { printf "render_qt.sh: rc=%s, %.1f s\n", rc, b - a }' >&2
[ -s "$out" ] && exit 0
echo "render_qt.sh: no screenshot written" >&2
exit 1
