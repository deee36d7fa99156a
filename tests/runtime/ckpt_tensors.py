# tests/runtime/ckpt_tensors.py: reads the tensors of a libppsrt checkpoint (the
# safetensors shards beside its index FILE: FILE.*.safetensors), for the tests that
# compare checkpoints. load(base) -> {name: (shape, values)}: values a tuple of floats
# (F32), or with raw=True the tensor's bytes (to compare bit for bit).
import glob, json, struct

def load(base, raw=False):
    t = {}
    for f in sorted(glob.glob(base + ".*.safetensors")):
        data = open(f, "rb").read()
        n = struct.unpack("<Q", data[:8])[0]
        hd = json.loads(data[8:8 + n])
        for k, v in hd.items():
            if k == "__metadata__":
                continue
            a, b = v["data_offsets"]
            body = data[8 + n + a:8 + n + b]
            t[k] = (v["shape"], body if raw else struct.unpack("<%df" % ((b - a) // 4), body))
    return t
