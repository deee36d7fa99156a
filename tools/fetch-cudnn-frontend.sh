#!/usr/bin/env bash
# fetch-cudnn-frontend.sh: installs the cuDNN frontend headers that the CUDA backend's fused
# attention (runtime/cuda/attn_cudnn.cpp) is compiled against, from the
# nvidia-cudnn-frontend wheel on PyPI (header-only C++; the wheel's Python module is not
# used). ./setup --deps runs it when the CUDA toolkit and cuDNN 9 headers are present and
# the frontend is not; configure then finds DIR/include/cudnn_frontend.h.
#   tools/fetch-cudnn-frontend.sh [DIR]     (default DIR: /opt/cudnn-frontend)
# Exit 0 when the headers are there (already or now), 1 when the download failed (the
# build then goes on without the cuDNN path, and configure says so).
set -euo pipefail
ver=1.32.0
dest=${1:-/opt/cudnn-frontend}
[ -f "$dest/include/cudnn_frontend.h" ] && exit 0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! python3 -m pip download -q --no-deps --only-binary=:all: -d "$tmp" "nvidia-cudnn-frontend==$ver" >"$tmp/log" 2>&1; then
  echo "fetch-cudnn-frontend: pip could not download nvidia-cudnn-frontend==$ver:" >&2
  tail -n 3 "$tmp/log" >&2
  exit 1
fi
python3 - "$tmp" <<'PY'
import glob, os, sys, zipfile
tmp = sys.argv[1]
whl = glob.glob(os.path.join(tmp, "*.whl"))[0]
with zipfile.ZipFile(whl) as z:
    for n in z.namelist():
        if n.startswith("include/") and not n.endswith("/"):
            z.extract(n, os.path.join(tmp, "fe"))
PY
[ -f "$tmp/fe/include/cudnn_frontend.h" ] || { echo "fetch-cudnn-frontend: no include/cudnn_frontend.h in the wheel" >&2; exit 1; }
mkdir -p "$(dirname "$dest")"
rm -rf "$dest.partial"
cp -r "$tmp/fe" "$dest.partial"
echo "$ver" > "$dest.partial/VERSION"
mv "$dest.partial" "$dest"
echo "fetch-cudnn-frontend: cuDNN frontend $ver headers in $dest/include"
