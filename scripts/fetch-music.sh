#!/usr/bin/env bash
# Fetch the MIT-licensed music tracks of the PyPI wheel immich-memories-music==0.1.0 (with BPM
# labels in its LICENSE-MUSIC) and decode calm_acoustic_1 (68 BPM) to a 32-bit float WAV for the
# real-audio time-stretch check of aria-cache (tests/vocoder_music.rs). Idempotent.
#
# The tracks are Ogg Opus, which the Rust audio decoders used here do not read; the decoding uses
# Python's `soundfile` (libsndfile ≥ 1.0.29 reads Opus), installed into a temporary virtual
# environment. Needs python3 with venv and pip, and network access to PyPI.
#
# Destination: ${ARIA_MUSIC_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/aria/music}/calm_acoustic_1.wav
set -euo pipefail

WHEEL="immich-memories-music==0.1.0"
SHA256="1b702f617250ed8ffe3dc2bba4d2105f842b6d5da08e8ff9a10110f54b7bd06a"
TRACK="immich_memories_music/tracks/calm/calm_acoustic_1.opus"
dest_dir="${ARIA_MUSIC_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/aria/music}"
dest="$dest_dir/calm_acoustic_1.wav"

if [ -s "$dest" ]; then
    echo "music: cached at $dest"
    exit 0
fi
if ! command -v python3 >/dev/null 2>&1; then
    echo "fetch-music: python3 (with venv and pip) is needed; without the track the check skips" >&2
    exit 1
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
python3 -m venv "$work/venv"
"$work/venv/bin/pip" download -q --no-deps "$WHEEL" -d "$work"
whl="$(ls "$work"/*.whl)"
if [ "$(sha256sum "$whl" | cut -d' ' -f1)" != "$SHA256" ]; then
    echo "fetch-music: checksum mismatch for $whl" >&2
    exit 1
fi
"$work/venv/bin/pip" install -q soundfile
mkdir -p "$dest_dir"
"$work/venv/bin/python" - "$whl" "$TRACK" "$dest.tmp" <<'PY'
import io, sys, zipfile
import soundfile as sf
whl, track, out = sys.argv[1:]
data, sr = sf.read(io.BytesIO(zipfile.ZipFile(whl).read(track)), dtype="float32", always_2d=True)
sf.write(out, data, sr, subtype="FLOAT", format="WAV")
print(f"decoded {track}: {data.shape[0]} frames, {data.shape[1]} channels, {sr} Hz")
PY
mv "$dest.tmp" "$dest"
echo "music: fetched to $dest"
