#!/usr/bin/env bash
# Serves ../shared/mapdata (or $MAPDATA) on http://127.0.0.1:${PORT:-8080} the way a real tile
# server does, so that TileSpool can be tried without internet:
#   - JSON files with every __BASE__ replaced by this server's URL (styles, TileJSON);
#   - /tiles/**.pbf (gzip-compressed MVT on disk) sent with Content-Encoding: gzip;
#   - glyphs, sprites and raster tiles as they are; missing files answer 404.
# Runs nginx in the foreground; Ctrl-C stops it.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
mapdata="$(cd "${MAPDATA:-$here/../shared/mapdata}" && pwd)"
port="${PORT:-8080}"
dir="$(mktemp -d /tmp/tilespool-mapdata.XXXXXX)"
trap 'rm -rf "$dir"' EXIT
nginx_bin="$(command -v nginx || echo /usr/sbin/nginx)"
cat > "$dir/nginx.conf" <<CONF
daemon off;
master_process off;
worker_processes 1;
pid $dir/nginx.pid;
error_log $dir/error.log;
events { worker_connections 1024; }
http {
    access_log $dir/access.log;
    client_body_temp_path $dir/body; proxy_temp_path $dir/proxy; fastcgi_temp_path $dir/fastcgi;
    uwsgi_temp_path $dir/uwsgi; scgi_temp_path $dir/scgi;
    types { application/json json; image/png png; image/webp webp; image/jpeg jpg; application/x-protobuf pbf; }
    keepalive_requests 100000;
    server {
        listen 127.0.0.1:$port;
        root $mapdata;
        location ~ \.json\$ {
            sub_filter_types application/json;
            sub_filter_once off;
            sub_filter "__BASE__" "http://127.0.0.1:$port";
        }
        location ~ ^/tiles/.*\.pbf\$ { add_header Content-Encoding gzip; }
    }
}
CONF
echo "serving $mapdata on http://127.0.0.1:$port (Ctrl-C stops)"
echo "try: cp spool/examples/local-mapdata-monaco.json spool/requests/.m.tmp && mv spool/requests/.m.tmp spool/requests/monaco.json"
"$nginx_bin" -c "$dir/nginx.conf" -p "$dir"
