"""Decode and prompt speed at depth per KV cache type, paired: each type's context holds the same
depth (its state saved once), and the types take turns, 5 rounds; max and median of each.

    python bench/kv_types_speed.py MODEL.gguf DEPTH f32,f16,bf16,q8_0,q4_0

tg16: 16 one-token decodes after the depth; pp256: a 256-token prompt after it.  2 threads.
"""
import time, sys, numpy as np
from toolkit.runtime import Model, Context
from toolkit.runtime.options import RuntimeOptions
p=sys.argv[1]; D=int(sys.argv[2]); types=sys.argv[3].split(",")
with Model(p, n_threads=2) as m:
    toks=((np.arange(D)*37+5)%m.n_vocab).astype(np.int32)
    ctxs={}; blobs={}
    for t in types:
        c=Context(m,n_ctx=D+600,n_ubatch=512,n_threads=2,options=RuntimeOptions(cache_type_k=t,cache_type_v=t))
        c.decode(toks); blobs[t]=c.state_bytes(); ctxs[t]=c
    res={t:{"tg":[],"pp":[]} for t in types}
    for rep in range(5):
        for t in types:
            c=ctxs[t]; c.load_state(blobs[t])
            t0=time.perf_counter()
            for i in range(16): c.decode([int(toks[i])])
            res[t]["tg"].append(16/(time.perf_counter()-t0))
            c.load_state(blobs[t])
            t0=time.perf_counter(); c.decode(toks[:256]); res[t]["pp"].append(256/(time.perf_counter()-t0))
    for t in types: print(t, "tg16 max %.1f med %.1f t/s" % (max(res[t]["tg"]), np.median(res[t]["tg"])), " pp256 max %.1f med %.1f" % (max(res[t]["pp"]), np.median(res[t]["pp"])))
