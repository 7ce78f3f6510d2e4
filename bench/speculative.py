"""Speculative decoding against plain decoding: generation tokens/s side by side, acceptance
rate and the extra memory, greedy (the outputs are checked to be the same tokens).

    python bench/speculative.py toolkit/data/default.gguf --threads 2 -n 128 --repeat 3
    python bench/speculative.py /tmp/b430/b430.q8_0.gguf --draft-model /tmp/b430/b430-early6.q8_0.gguf
    python bench/speculative.py MODEL.gguf --make-early-exit 6 OUT.gguf   # a draft: the first 6 blocks

The prompt is a code-editing one: a function from bench/data/stdlib-heldout.txt, then a
comment asking for the same function with a name changed, then the edited first line, so a
model that copies writes the function again with small changes (what prompt lookup serves);
-f FILE takes another prompt.
Modes: plain, --lookup with each --draft-max in --k-lookup, with --draft-model each
--draft-max in --k-draft, with --mtp (the model's own NextN head) each --draft-max in --k-mtp, and with --k-oracle an oracle drafter: the plain run's own greedy
tokens, so every draft is accepted.  The oracle is no way to decode; it measures the ceiling
a perfect drafter would reach with this model's verify cost (the speed-up a trained model
that copies its input would approach with --lookup), separate from what a given model accepts.  Runs alternate mode by mode in each round (a shared machine's load
drifts); the table shows the median of the rounds' gen tokens/s.  Extra memory: the context's
draft window (the recurrent-state ring), plus for a draft model its weights and context.

--make-early-exit N OUT writes OUT: the model cut to its first N blocks (the same embedding,
output norm and output head; per-layer keys and the attention layer list truncated), a draft
model that shares the vocabulary and the first layers (LayerSkip-style self-speculation).
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

FUNC_LINES = (412, 432)     # _interleave_addrinfos in stdlib-heldout.txt (1-based, inclusive)


def edit_prompt() -> str:
    with open(os.path.join(HERE, "data", "stdlib-heldout.txt"), encoding="utf-8") as f:
        lines = f.read().split("\n")
    src = "\n".join(lines[FUNC_LINES[0] - 1:FUNC_LINES[1]])
    first = lines[FUNC_LINES[0] - 1].replace("addrinfos", "infos")
    return (f"{src}\n\n\n# The same function with the argument `addrinfos` renamed to `infos`:\n{first}\n")


def make_early_exit(src: str, n_keep: int, out: str) -> None:
    """OUT = SRC cut to blocks [0, n_keep) (tensors copied as they are, per-layer arrays cut)."""
    import numpy as np
    from toolkit.gguf_io import GGUFFile
    from gguf import GGUFReader, GGUFWriter, GGUFValueType

    r = GGUFReader(src)
    arch = GGUFFile(src).arch
    w = GGUFWriter(out, arch)
    n_layer = None
    for kv in r.fields.values():
        if kv.name.startswith("GGUF.") or kv.name == "general.architecture":
            continue
        vt = kv.types[0]
        if vt == GGUFValueType.ARRAY:
            sub = kv.types[1]
            vals = [kv.parts[i].tolist()[0] if sub != GGUFValueType.STRING else bytes(kv.parts[i]).decode("utf-8")
                    for i in kv.data]
            if kv.name == f"{arch}.attention.layer_indices":
                vals = [v for v in vals if v < n_keep]
            elif kv.name == f"{arch}.ple.layers" and max(vals, default=-1) >= n_keep:
                sys.exit(f"--make-early-exit {n_keep}: {src} has PLE layers {vals}; keep at least "
                         f"{max(vals) + 1} blocks")
            elif kv.name.startswith(f"{arch}.ple."):
                pass               # per PLE layer or per PLE head, not per block
            elif sub != GGUFValueType.STRING and n_layer is not None and len(vals) == n_layer:
                vals = vals[:n_keep]
            if vals:     # an empty array cannot be written: the key is left out
                w.add_key_value(kv.name, vals, vt, sub_type=sub)
        else:
            v = bytes(kv.parts[kv.data[0]]).decode("utf-8") if vt == GGUFValueType.STRING else kv.parts[kv.data[0]].tolist()[0]
            if kv.name == f"{arch}.block_count":
                n_layer, v = int(v), n_keep
            w.add_key_value(kv.name, v, vt)
    keep = [t for t in r.tensors if not t.name.startswith("blk.") or int(t.name.split(".")[1]) < n_keep]
    for t in keep:   # numpy-order shape (bytes per row for block types: the writer converts)
        w.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for t in keep:
        w.write_tensor_data(np.asarray(t.data))
    w.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--draft-model")
    ap.add_argument("--make-early-exit", nargs=2, metavar=("N", "OUT"))
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--k-lookup", type=int, nargs="*", default=[4, 8, 16],
                    help="--draft-max values for --lookup (none: no lookup runs) [default: 4 8 16]")
    ap.add_argument("--k-draft", type=int, nargs="+", default=[2, 4, 8])
    ap.add_argument("--k-oracle", type=int, nargs="*", default=[],
                    help="draft-max values for the oracle drafter (the plain run's tokens; the ceiling)")
    ap.add_argument("--mtp", action="store_true", help="also draft with the model's own MTP / NextN head")
    ap.add_argument("--k-mtp", type=int, nargs="+", default=[1, 2, 3, 4], help="--draft-max values for --mtp")
    ap.add_argument("--ngram", type=int, default=3)
    ap.add_argument("-f", "--file", help="prompt text from this file instead of the code-editing prompt")
    a = ap.parse_args()
    if a.make_early_exit:
        make_early_exit(a.model, int(a.make_early_exit[0]), a.make_early_exit[1])
        print(f"wrote {a.make_early_exit[1]}: the first {a.make_early_exit[0]} blocks of {a.model}")
        return

    from toolkit.runtime import Context, Model
    from toolkit.runtime.generate import generate
    from toolkit.runtime.sampling import Sampler, SamplerParams
    from toolkit.runtime.mtp import check_mtp, open_mtp_draft
    from toolkit.runtime.speculative import DraftModel, PromptLookup, check_same_vocab, generate_speculative
    from toolkit.runtime.tokenizer import Tokenizer

    m = Model(a.model, n_threads=a.threads)
    tok = Tokenizer.from_gguf(m.gguf)
    text = edit_prompt() if a.file is None else open(a.file, encoding="utf-8").read()
    prompt = tok.encode(text, add_special=True, parse_special=True)
    dm = Model(a.draft_model, n_threads=a.threads) if a.draft_model else None
    if dm is not None:
        check_same_vocab(tok, Tokenizer.from_gguf(dm.gguf), a.draft_model)
    n_ctx = len(prompt) + a.n + 64
    greedy = SamplerParams(temp=0)

    def plain():
        with Context(m, n_ctx=n_ctx) as ctx:
            r = generate(ctx, tok, prompt, a.n, Sampler(greedy), ignore_eos=True)
        return r, None, 0

    def lookup(k):
        def f():
            with Context(m, n_ctx=n_ctx) as ctx:
                ctx.memory.set_draft_window(k, keep_last=False)   # as toolkit run / chat set a target's
                extra = ctx.memory_report()["draft"]
                r = generate_speculative(ctx, tok, prompt, a.n, Sampler(greedy), PromptLookup(a.ngram), draft_max=k,
                                         ignore_eos=True)
            return r, r.spec, extra
        return f

    def draft(k):
        def f():
            with Context(m, n_ctx=n_ctx) as ctx, Context(dm, n_ctx=n_ctx, n_checkpoints=1) as dctx:
                ctx.memory.set_draft_window(k, keep_last=False)
                dctx.memory.set_draft_window(k)
                rep = dctx.memory_report()
                extra = ctx.memory_report()["draft"] + sum(rep.values())
                r = generate_speculative(ctx, tok, prompt, a.n, Sampler(greedy), DraftModel(dctx, greedy, 0),
                                         draft_max=k, ignore_eos=True)
            return r, r.spec, extra
        return f

    def mtp(k):
        def f():
            with Context(m, n_ctx=n_ctx) as ctx:
                ctx.memory.set_draft_window(k, keep_last=False)
                d = open_mtp_draft(m, ctx, n_ctx=n_ctx, params=greedy)
                try:
                    extra = ctx.memory_report()["draft"] + sum(d.ctx.memory_report().values())
                    r = generate_speculative(ctx, tok, prompt, a.n, Sampler(greedy), d, draft_max=k, ignore_eos=True)
                finally:
                    d.close()
                    ctx.on_hidden = None
            return r, r.spec, extra
        return f

    class Oracle:
        """Drafts the plain greedy run's next tokens (known once `plain` has run)."""
        def draft(self, history, k):
            i = len(history) - len(prompt)
            return [int(t) for t in ref[i:i + k]], None

    def oracle(k):
        def f():
            with Context(m, n_ctx=n_ctx) as ctx:
                ctx.memory.set_draft_window(k, keep_last=False)
                extra = ctx.memory_report()["draft"]
                r = generate_speculative(ctx, tok, prompt, a.n, Sampler(greedy), Oracle(), draft_max=k, ignore_eos=True)
            return r, r.spec, extra
        return f

    modes = [("plain", plain)] + [(f"lookup K={k}", lookup(k)) for k in a.k_lookup]
    modes += [(f"oracle K={k}", oracle(k)) for k in a.k_oracle]
    if dm is not None:
        modes += [(f"draft K={k}", draft(k)) for k in a.k_draft]
    if a.mtp:
        check_mtp(m)
        modes += [(f"mtp K={k}", mtp(k)) for k in a.k_mtp]
    tps: dict[str, list[float]] = {name: [] for name, _ in modes}
    info: dict[str, tuple] = {}
    ref = None
    for rnd in range(a.repeat + 1):          # round 0 warms the caches and is not counted
        for name, fn in modes:
            r, spec, extra = fn()
            if ref is None:
                ref = r.tokens
            if r.tokens != ref:
                sys.exit(f"{name}: the tokens differ from plain greedy decoding")
            if rnd:
                tps[name].append(r.timings.gen_tps)
            info[name] = (spec, extra)
    report(a, len(prompt), [name for name, _ in modes], tps, info)


def report(a, n_prompt: int, names: list[str], tps: dict, info: dict) -> None:
    """The table (median gen tokens/s per mode, speed-up over plain, draft counts, extra
    memory), the acceptance per draft position and the best --draft-max per drafter."""
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    print(f"{a.model}: prompt {n_prompt} tokens, {a.n} generated, {a.threads} threads, median of {a.repeat} rounds "
          f"(load average {load}; a shared machine)")
    base = statistics.median(tps["plain"])
    print(f"{'mode':<14}{'gen t/s':>10}{'speed-up':>10}{'accepted':>10}{'drafted':>9}{'verify':>8}{'accept %':>10}{'extra MiB':>11}")
    for name in names:
        spec, extra = info[name]
        med = statistics.median(tps[name])
        sp = (f"{spec.n_accepted:>10}{spec.n_drafted:>9}{spec.n_verify:>8}{100 * spec.acceptance:>9.1f}%"
              if spec else f"{'':>10}{'':>9}{'':>8}{'':>10}")
        print(f"{name:<14}{med:>10.1f}{med / base:>9.2f}x{sp}{extra / 2**20:>11.2f}")
    print("draft-model extra memory: its weights and its context (KV, recurrent state, window, compute); "
          "mtp: the draft window and the head's context")
    spec_modes = [name for name in names if info[name][0] is not None and info[name][0].n_drafted]
    if spec_modes:
        print("acceptance per draft position (drafts with a j-th token that kept it):")
        for name in spec_modes:
            print(f"  {name:<14}" + " ".join(f"{100 * x:5.1f}%" for x in info[name][0].acceptance_at()))
        for kind in ("lookup", "draft", "mtp"):
            best = max((n for n in spec_modes if n.startswith(kind)), key=lambda n: statistics.median(tps[n]), default=None)
            if best is not None:
                print(f"best --draft-max for {kind}: {best.split('=')[1]} ({statistics.median(tps[best]) / base:.2f}x plain)")


if __name__ == "__main__":
    main()
