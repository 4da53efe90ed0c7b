"""Generate a clip through aria's C API from Python (ctypes, standard library only).

    python3 aria_ctypes.py LIBARIA MODEL_DIR OUT.wav

LIBARIA is the shared library (`libaria_capi.so`, `.dylib` or `aria_capi.dll`, built by
`cargo build --release -p aria-capi`); MODEL_DIR a model folder (e.g. the demo model:
`aria demo` prints where it is). Writes a 16-bit stereo WAV with Python's `wave` module.
"""

import ctypes
import struct
import sys
import wave

PROGRESS = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint32)


def main(lib_path, model, out):
    lib = ctypes.CDLL(lib_path)
    lib.aria_last_error.restype = ctypes.c_char_p
    lib.aria_version.restype = ctypes.c_char_p
    lib.aria_model_load.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)]
    lib.aria_model_sample_rate.argtypes = [ctypes.c_void_p]
    lib.aria_model_sample_rate.restype = ctypes.c_uint32
    lib.aria_model_channels.argtypes = [ctypes.c_void_p]
    lib.aria_model_channels.restype = ctypes.c_uint32
    lib.aria_model_frames.argtypes = [ctypes.c_void_p, ctypes.c_double, ctypes.POINTER(ctypes.c_size_t)]
    lib.aria_generate_into.argtypes = [
        ctypes.c_void_p, ctypes.c_char_p, ctypes.POINTER(ctypes.c_float), ctypes.c_size_t,
        ctypes.POINTER(ctypes.c_size_t), PROGRESS, ctypes.c_void_p,
    ]
    lib.aria_model_free.argtypes = [ctypes.c_void_p]

    model_ptr = ctypes.c_void_p()
    if lib.aria_model_load(model.encode(), b'{"threads": 2}', ctypes.byref(model_ptr)) != 0:
        raise RuntimeError(lib.aria_last_error().decode())
    try:
        rate = lib.aria_model_sample_rate(model_ptr)
        channels = lib.aria_model_channels(model_ptr)
        seconds = 0.5
        frames = ctypes.c_size_t()
        lib.aria_model_frames(model_ptr, seconds, ctypes.byref(frames))
        n = frames.value * channels
        buf = (ctypes.c_float * n)()
        written = ctypes.c_size_t()
        steps = []

        @PROGRESS
        def progress(_user, done, total):
            steps.append((done, total))
            return 0

        req = b'{"prompt": "soft rain on a tin roof", "seconds": 0.5, "steps": 2, "seed": 1}'
        rc = lib.aria_generate_into(model_ptr, req, buf, n, ctypes.byref(written), progress, None)
        if rc != 0:
            raise RuntimeError(lib.aria_last_error().decode())
        assert written.value == n, (written.value, n)
        assert steps and steps[-1][0] == steps[-1][1], steps
    finally:
        lib.aria_model_free(model_ptr)
    with wave.open(out, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(rate)
        pcm = b"".join(struct.pack("<h", int(max(-1.0, min(1.0, v)) * 32767)) for v in buf)
        w.writeframes(pcm)
    print(f"aria {lib.aria_version().decode()}: wrote {out} ({frames.value} frames, {rate} Hz)")


if __name__ == "__main__":
    main(*sys.argv[1:4])
