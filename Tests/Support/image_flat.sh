#!/usr/bin/env bash
# Tells a rendered map from a flat colour (the picture a map client shows when it has no style,
# or a style but no tiles).
#
# Usage: image_flat.sh PNG [IGNORE_BOTTOM_PX]
#   Measures the image without its bottom IGNORE_BOTTOM_PX rows (default 48): there Qt's mapboxgl
#   plugin (bottom-left, ~17 px) and MapLibre GL JS (bottom-right box, ~34 px) draw the attribution,
#   which shows even when no tile loaded and would make a blank map look non-flat.
#   Prints "colours=N stddev=S" (distinct colours; ImageMagick's standard deviation, 0..1).
# Exit: 0 = NOT flat (colours > 8 and stddev > 0.005): something was drawn;
#       1 = flat; 2 = bad usage or unreadable image.
# Measured on 800x600 Monaco renders (bright style, zoom 13): a map 3,500-7,100 colours, stddev
# 0.045-0.067; no style, unreachable style, or style without tiles: 1 colour, stddev 0.
set -u
[ $# -ge 1 ] && [ $# -le 2 ] || { sed -n '2,15p' "$0" >&2; exit 2; }
png=$1 cut=${2:-48}
[[ $cut =~ ^[0-9]+$ ]] || { echo "image_flat.sh: IGNORE_BOTTOM_PX must be a whole number" >&2; exit 2; }
size=$(identify -format '%w %h' "$png" 2>/dev/null) || { echo "image_flat.sh: cannot read $png" >&2; exit 2; }
read -r w h <<<"$size"
keep=$(( h > cut ? h - cut : h ))
read -r colours sd < <(identify -crop "${w}x${keep}+0+0" -format '%k %[fx:standard_deviation]\n' "$png" 2>/dev/null | head -1)
[ -n "${sd:-}" ] || { echo "image_flat.sh: cannot measure $png" >&2; exit 2; }
echo "colours=$colours stddev=$sd"
awk -v c="$colours" -v s="$sd" 'BEGIN { exit !(c > 8 && s > 0.005) }' && exit 0
exit 1
