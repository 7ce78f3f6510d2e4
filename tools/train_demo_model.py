#!/usr/bin/env python3
"""Train the small hybrid model that ships inside the package (toolkit/data/default.gguf).

What it trains: a ``BambaForCausalLM`` (Mamba-2 mixers with one attention layer) of about
5 M parameters, on the Python standard library's own ``.py`` files, with a byte-level BPE
tokenizer trained by ``tokenizers`` on the same training files.  Needs the ``[dev]`` extra
(torch + transformers); the package itself never imports either.

Reproducibility
    * Corpus: every ``*.py`` under ``sysconfig.get_paths()["stdlib"]``, sorted by relative
      POSIX path, minus tests (``test``/``tests``/``idle_test`` dirs, ``test_*.py``),
      ``site-packages``, ``encodings`` (codec tables, not code) and ``pydoc_data`` (one
      600 kB docstring).  The held-out slice is every file whose index in that sorted list
      is ``HELDOUT_OFFSET (mod HELDOUT_EVERY)``: 1 file in 20.  The list and its SHA-256
      are written to ``train_meta.json``; a different Python version gives a different
      list (the meta file says which one was used).
    * Seeds: ``--seed`` seeds torch and the batch sampler; one thread
      (``--threads 1``) and ``torch.use_deterministic_algorithms(True)``.
    * Budget: a fixed ``--steps`` count (the default fits 2 CPU cores in well under an
      hour); ``--max-minutes`` is only a safety stop.  If it fires, ``train_meta.json``
      says so (``stopped_early``, ``steps_done``) and ``--stop-after STEPS_DONE`` (same
      ``--steps``, so the same learning-rate schedule) reproduces that run step for step.

Widths: d_model 256, d_inner 512, d_ff 768 and vocab 4096 are multiples of 256, so every
matrix's row length (ggml ne0 = input features: 256 or 512 or 768) is a whole number of
k-quant super-blocks (QK_K = 256) and Q2_K..Q6_K apply to every weight.

Outputs (in ``--out``): ``config.json``, ``generation_config.json``,
``model-0000N-of-0000M.safetensors`` shards + ``model.safetensors.index.json``,
``tokenizer.json``, ``tokenizer_config.json``, ``train_meta.json`` (file list hash, steps,
losses, held-out perplexity before/after) and ``heldout.txt`` (the held-out files joined
by a blank line: the text ``toolkit perplexity`` scores).

``--arch qwen35`` trains instead a Qwen3.5-style hybrid (``Qwen3_5ForCausalLM``: gated delta
net layers with gated full attention every 4th, tools/demo_qwen35.py, torch only) with one MTP
(NextN) layer trained jointly (loss = main CE + ``--mtp-weight`` x MTP CE, the MTP row i
predicting token i + 2, as the DeepSeek-V3 / Qwen3-Next reports describe), on the same corpus
and held-out split, reusing the shipped demo's tokenizer (``--tokenizer``, so the Bamba demo
can draft for it and the perplexities compare).  It writes config.json, model.safetensors
(float32, HF names including ``mtp.*``), the tokenizer, generation_config.json and
train_meta.json (both loss curves, the held-out perplexity of the main head).

Usage::

    pip install -e ".[dev]"
    python tools/train_demo_model.py --out /tmp/demo-hf                 # full run
    python tools/train_demo_model.py --out /tmp/smoke --smoke           # 1-minute check
    python tools/train_demo_model.py --arch qwen35 --out /tmp/q35 --steps 170 --batch 4 --threads 2 --max-minutes 57

Perplexity here follows llama.cpp's ``llama-perplexity``: non-overlapping chunks of
``n_ctx`` tokens, only the second half of each chunk scored (ref: llama.cpp
tools/perplexity/perplexity.cpp, ``perplexity()``).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import sys
import sysconfig
import time
from pathlib import Path

HELDOUT_EVERY = 20
HELDOUT_OFFSET = 7
EXCLUDED_DIRS = {"test", "tests", "idle_test", "site-packages", "encodings", "pydoc_data", "__pycache__"}
EOT = "<|endoftext|>"
PAD = "<|pad|>"


def corpus_files(root: Path) -> list[Path]:
    """The sorted list of stdlib ``.py`` files used for training and evaluation."""
    out = []
    for p in root.rglob("*.py"):
        rel = p.relative_to(root)
        if any(part in EXCLUDED_DIRS for part in rel.parts[:-1]) or rel.name.startswith("test_"):
            continue
        out.append(p)
    return sorted(out, key=lambda p: p.relative_to(root).as_posix())


def read_text(p: Path) -> str:
    return p.read_bytes().decode("utf-8", errors="replace")


def train_tokenizer(texts: list[str], vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[EOT, PAD],          # ids 0 and 1
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    return tok


def perplexity(model, tokens, n_ctx: int, max_chunks: int) -> tuple[float, float, int]:
    """llama-perplexity protocol over a 1-D token tensor: (ppl, ppl stderr, n scored)."""
    import torch

    n_chunks = min(len(tokens) // n_ctx, max_chunks)
    nll = nll2 = 0.0
    count = 0
    first = n_ctx // 2
    model.eval()
    with torch.no_grad():
        for c in range(n_chunks):
            x = tokens[c * n_ctx:(c + 1) * n_ctx].unsqueeze(0)
            logits = model(input_ids=x).logits[0].double()
            lp = torch.log_softmax(logits[first:n_ctx - 1], dim=-1)
            tgt = x[0, first + 1:n_ctx]
            v = -lp.gather(1, tgt.unsqueeze(1)).squeeze(1)
            nll += float(v.sum())
            nll2 += float((v * v).sum())
            count += v.numel()
    model.train()
    nll /= count
    nll2 /= count
    ppl = math.exp(nll)
    unc = math.sqrt(max(nll2 - nll * nll, 0.0) / (count - 1)) * ppl
    return ppl, unc, count


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--steps", type=int, default=450, help="fixed optimizer step count (the recorded run)")
    ap.add_argument("--max-minutes", type=float, default=55.0, help="safety stop; a stopped run is marked in train_meta.json")
    ap.add_argument("--stop-after", type=int, default=0,
                    help="stop after this many steps of the --steps schedule (0: run all); reproduces a run "
                         "that --max-minutes stopped (train_meta.json: steps_done)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--eval-ctx", type=int, default=256)
    ap.add_argument("--eval-chunks", type=int, default=64)
    ap.add_argument("--shard-size", default="1MB", help="save_pretrained max_shard_size")
    ap.add_argument("--save-dtype", choices=["float32", "bfloat16"], default="float32")
    ap.add_argument("--save-init", type=Path, default=None, help="also save the random-init model here")
    ap.add_argument("--smoke", action="store_true", help="tiny run to check the script (a few steps)")
    ap.add_argument("--arch", choices=["bamba", "qwen35"], default="bamba",
                    help="bamba: the shipped 5.9M demo (transformers); qwen35: the Qwen3.5-style hybrid with one "
                         "MTP layer (tools/demo_qwen35.py, torch only), on the shipped demo's tokenizer")
    ap.add_argument("--tokenizer", type=Path, default=Path(__file__).resolve().parents[1] / "examples" / "demo-hf",
                    help="qwen35: the directory whose tokenizer.json / tokenizer_config.json are reused")
    ap.add_argument("--mtp-weight", type=float, default=0.3, help="qwen35: weight of the MTP loss (DeepSeek-V3: 0.3)")
    args = ap.parse_args()
    if args.smoke:
        args.steps, args.eval_chunks, args.batch = 5, 2, 4
    return args


def load_corpus(root: Path) -> dict | None:
    """The stdlib corpus split into train and held-out files (None when there is none)."""
    files = corpus_files(root)
    if not files:
        return None
    rels = [p.relative_to(root).as_posix() for p in files]
    held = [i for i in range(len(files)) if i % HELDOUT_EVERY == HELDOUT_OFFSET]
    held_set = set(held)
    train_texts = [read_text(files[i]) for i in range(len(files)) if i not in held_set]
    held_texts = [read_text(files[i]) for i in held]
    list_sha = hashlib.sha256("\n".join(rels).encode()).hexdigest()
    print(f"corpus: {root} {len(files)} files ({len(train_texts)} train, {len(held_texts)} held out), "
          f"list sha256 {list_sha[:16]}", flush=True)
    return {"files": files, "rels": rels, "held": held, "train_texts": train_texts, "held_texts": held_texts,
            "list_sha": list_sha}


def build_model(vocab_size: int, eot: int, seed: int):
    """The 4-layer Bamba (one attention layer) with Mamba-2's dt initialisation."""
    import torch
    from transformers import BambaConfig, BambaForCausalLM

    cfg = BambaConfig(
        vocab_size=vocab_size,
        hidden_size=256,
        intermediate_size=768,
        num_hidden_layers=4,
        attn_layer_indices=[2],
        num_attention_heads=4,
        num_key_value_heads=1,
        mamba_n_heads=8,
        mamba_d_head=64,
        mamba_expand=2,
        mamba_d_state=64,
        mamba_n_groups=1,
        mamba_d_conv=4,
        mamba_chunk_size=256,
        max_position_embeddings=4096,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
        tie_word_embeddings=False,
        bos_token_id=eot, eos_token_id=eot, pad_token_id=1,
        initializer_range=0.02,
    )
    model = BambaForCausalLM(cfg)
    # Mamba-2 dt init (ref: state-spaces/mamba mamba2.py): dt ~ logUniform[1e-3, 1e-1],
    # dt_bias = softplus^-1(dt); transformers' default (dt_bias = 1) forgets too fast.
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for layer in model.model.layers:
            mixer = getattr(layer, "mamba", None)
            if mixer is not None:
                dt = torch.exp(torch.rand(mixer.num_heads, generator=g) * (math.log(0.1) - math.log(1e-3)) + math.log(1e-3))
                mixer.dt_bias.copy_(dt + torch.log(-torch.expm1(-dt)))
    return model


def train(model, train_ids, args, t_start: float) -> tuple[list, bool, float]:
    """AdamW with warmup + cosine decay on random windows; returns (losses, stopped_early, minutes)."""
    import numpy as np
    import torch

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    warmup = max(1, args.steps // 20)

    def lr_at(step: int) -> float:
        if step < warmup:
            return args.lr * (step + 1) / warmup
        t = (step - warmup) / max(1, args.steps - warmup)
        return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))

    rng = np.random.default_rng(args.seed)
    L = args.seq_len
    losses = []
    stopped_early = False
    t_train = time.time()
    model.train()
    n_run = min(args.steps, args.stop_after) if args.stop_after > 0 else args.steps
    for step in range(n_run):
        if (time.time() - t_start) / 60 > args.max_minutes:
            stopped_early = True
            print(f"max-minutes reached at step {step}: stopping early (NOT the recorded configuration)", flush=True)
            break
        starts = rng.integers(0, len(train_ids) - L - 1, size=args.batch)
        x = torch.stack([train_ids[s:s + L] for s in starts])
        y = torch.stack([train_ids[s + 1:s + L + 1] for s in starts])
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        logits = model(input_ids=x).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if step % 25 == 0 or step == n_run - 1:
            el = time.time() - t_train
            print(f"step {step:5d} loss {np.mean(losses[-25:]):.4f} lr {lr_at(step):.2e} "
                  f"{el / 60:.1f} min ({(step + 1) * args.batch * L / el:.0f} tok/s)", flush=True)
    return losses, stopped_early, (time.time() - t_train) / 60


def main() -> int:
    args = parse_args()
    if args.arch == "qwen35":
        return main_qwen35(args)
    import numpy as np
    import torch
    from transformers import PreTrainedTokenizerFast

    t_start = time.time()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    torch.use_deterministic_algorithms(True)

    root = Path(sysconfig.get_paths()["stdlib"])
    corpus = load_corpus(root)
    if corpus is None:
        print(f"error: no .py files under {root}", file=sys.stderr)
        return 2
    train_texts, held_texts, rels, held = corpus["train_texts"], corpus["held_texts"], corpus["rels"], corpus["held"]

    tok = train_tokenizer(train_texts, args.vocab)
    assert tok.token_to_id(EOT) == 0 and tok.token_to_id(PAD) == 1
    eot = 0

    # Training stream: each file's tokens followed by <|endoftext|>.
    ids: list[int] = []
    for enc in tok.encode_batch(train_texts):
        ids.extend(enc.ids)
        ids.append(eot)
    train_ids = torch.tensor(ids, dtype=torch.long)
    heldout_text = "\n\n".join(held_texts)
    held_ids = torch.tensor(tok.encode(heldout_text).ids, dtype=torch.long)
    print(f"tokens: train {len(train_ids)}, held-out {len(held_ids)} "
          f"({sum(map(len, train_texts)) / len(train_ids):.2f} chars/token)", flush=True)

    model = build_model(tok.get_vocab_size(), eot, args.seed)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {n_params} parameters", flush=True)

    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=EOT, eos_token=EOT, pad_token=PAD)
    init_ppl = perplexity(model, held_ids, args.eval_ctx, args.eval_chunks)
    print(f"held-out ppl (random init): {init_ppl[0]:.2f} +/- {init_ppl[1]:.2f} over {init_ppl[2]} tokens", flush=True)
    if args.save_init:
        model.save_pretrained(args.save_init, max_shard_size=args.shard_size)
        hf_tok.save_pretrained(args.save_init)

    losses, stopped_early, train_minutes = train(model, train_ids, args, t_start)
    steps_done = len(losses)

    final_ppl = perplexity(model, held_ids, args.eval_ctx, args.eval_chunks)
    print(f"held-out ppl (trained): {final_ppl[0]:.2f} +/- {final_ppl[1]:.2f} over {final_ppl[2]} tokens", flush=True)

    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    if args.save_dtype == "bfloat16":
        model = model.to(torch.bfloat16)
    model.generation_config.bos_token_id = eot
    model.generation_config.eos_token_id = eot
    model.generation_config.pad_token_id = 1
    model.save_pretrained(out, max_shard_size=args.shard_size)
    hf_tok.save_pretrained(out)
    (out / "heldout.txt").write_text(heldout_text, encoding="utf-8")
    meta = {
        "python": platform.python_version(),
        "stdlib": str(root),
        "n_files": len(corpus["files"]),
        "file_list_sha256": corpus["list_sha"],
        "heldout_rule": f"index % {HELDOUT_EVERY} == {HELDOUT_OFFSET} in the sorted list",
        "heldout_files": [rels[i] for i in held],
        "train_tokens": len(train_ids),
        "heldout_tokens": len(held_ids),
        "n_params": n_params,
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "torch": torch.__version__,
        "steps_done": steps_done,
        "stopped_early": stopped_early,
        "train_minutes": round(train_minutes, 2),
        "total_minutes": round((time.time() - t_start) / 60, 2),
        "final_train_loss": float(np.mean(losses[-50:])) if losses else None,
        "heldout_ppl_init": {"ppl": init_ppl[0], "stderr": init_ppl[1], "n_tokens": init_ppl[2], "n_ctx": args.eval_ctx},
        "heldout_ppl_trained": {"ppl": final_ppl[0], "stderr": final_ppl[1], "n_tokens": final_ppl[2], "n_ctx": args.eval_ctx},
        "loss_curve": [round(float(np.mean(losses[i:i + 25])), 4) for i in range(0, len(losses), 25)],
    }
    (out / "train_meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"saved to {out} in {meta['total_minutes']} min", flush=True)

    # A short greedy sample, to see it is Python-looking.
    model = model.float().eval()
    prompt = torch.tensor([tok.encode("def fibonacci(n):").ids])
    with torch.no_grad():
        gen = model.generate(prompt, max_new_tokens=40, do_sample=False)
    print("sample:", tok.decode(gen[0].tolist()), flush=True)
    return 0


def lr_schedule(args):
    """Linear warmup (steps / 20) then cosine decay to 10 % of --lr over --steps."""
    warmup = max(1, args.steps // 20)

    def lr_at(step: int) -> float:
        if step < warmup:
            return args.lr * (step + 1) / warmup
        t = (step - warmup) / max(1, args.steps - warmup)
        return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))
    return lr_at


def train_qwen35(model, train_ids, args, t_start: float) -> tuple[list, list, bool, float]:
    """AdamW on random windows, loss = main CE + --mtp-weight * MTP CE (the MTP row i predicts
    token i + 2).  Returns (main losses, mtp losses, stopped_early, minutes)."""
    import numpy as np
    import torch
    import torch.nn.functional as F

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    lr_at = lr_schedule(args)
    rng = np.random.default_rng(args.seed)
    L, V = args.seq_len, model.lm_head.weight.shape[0]
    losses, mtp_losses, stopped_early, t_train = [], [], False, time.time()
    n_run = min(args.steps, args.stop_after) if args.stop_after > 0 else args.steps
    model.train()
    for step in range(n_run):
        if (time.time() - t_start) / 60 > args.max_minutes:
            stopped_early = True
            print(f"max-minutes reached at step {step}: stopping early (--stop-after {step} replays it)", flush=True)
            break
        starts = rng.integers(0, len(train_ids) - L - 1, size=args.batch)
        x = torch.stack([train_ids[s:s + L + 1] for s in starts])
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        logits, mlog = model(x[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, V), x[:, 1:].reshape(-1))
        mloss = F.cross_entropy(mlog.reshape(-1, V), x[:, 2:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        (loss + args.mtp_weight * mloss).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        mtp_losses.append(mloss.item())
        el = time.time() - t_train
        print(f"step {step:5d} loss {loss.item():.4f} mtp {mloss.item():.4f} lr {lr_at(step):.2e} "
              f"{el / 60:.1f} min ({(step + 1) * args.batch * L / el:.0f} tok/s)", flush=True)
    return losses, mtp_losses, stopped_early, (time.time() - t_train) / 60


class _LogitsOnly:
    """model(input_ids=x).logits for perplexity(): the main head only."""

    def __init__(self, model):
        self.model = model

    def __call__(self, input_ids):
        return type("Out", (), {"logits": self.model(input_ids, mtp=False)[0]})()

    def eval(self):
        self.model.eval()

    def train(self):
        self.model.train()


def save_qwen35(model, cfg: dict, args, meta: dict) -> None:
    """config.json, model.safetensors (HF names, float32), the reused tokenizer, train_meta.json."""
    import shutil

    from safetensors.torch import save_file

    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")
    save_file(model.hf_state_dict(), str(out / "model.safetensors"), metadata={"format": "pt"})
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(args.tokenizer / name, out / name)
    (out / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": cfg["bos_token_id"], "eos_token_id": cfg["eos_token_id"],
         "pad_token_id": cfg["pad_token_id"]}, indent=2) + "\n")
    (out / "train_meta.json").write_text(json.dumps(meta, indent=1) + "\n")


def main_qwen35(args) -> int:
    """--arch qwen35: the corpus and held-out split of the Bamba demo, its tokenizer, the
    Qwen3.5-style model of tools/demo_qwen35.py with one MTP layer trained jointly."""
    import numpy as np
    import torch
    from tokenizers import Tokenizer

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from demo_qwen35 import Qwen35Mtp, qwen35_config

    t_start = time.time()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    root = Path(sysconfig.get_paths()["stdlib"])
    corpus = load_corpus(root)
    if corpus is None:
        print(f"error: no .py files under {root}", file=sys.stderr)
        return 2
    tok = Tokenizer.from_file(str(args.tokenizer / "tokenizer.json"))
    eot = tok.token_to_id(EOT)
    ids: list[int] = []
    for enc in tok.encode_batch(corpus["train_texts"]):
        ids.extend(enc.ids)
        ids.append(eot)
    train_ids = torch.tensor(ids, dtype=torch.long)
    heldout_text = "\n\n".join(corpus["held_texts"])
    held_ids = torch.tensor(tok.encode(heldout_text).ids, dtype=torch.long)
    print(f"tokens: train {len(train_ids)}, held-out {len(held_ids)}", flush=True)
    cfg = qwen35_config(tok.get_vocab_size(), eot, tok.token_to_id(PAD))
    model = Qwen35Mtp(cfg)
    n_params = sum(p.numel() for p in model.parameters())
    n_mtp = sum(p.numel() for n, p in model.named_parameters() if n.startswith("mtp_"))
    print(f"model: {n_params} parameters ({n_mtp} in the MTP block)", flush=True)
    losses, mtp_losses, stopped_early, train_minutes = train_qwen35(model, train_ids, args, t_start)
    ppl = perplexity(_LogitsOnly(model), held_ids, args.eval_ctx, args.eval_chunks)
    print(f"held-out ppl (trained): {ppl[0]:.2f} +/- {ppl[1]:.2f} over {ppl[2]} tokens", flush=True)
    meta = {
        "arch": "qwen35", "python": platform.python_version(), "stdlib": str(root),
        "n_files": len(corpus["files"]), "file_list_sha256": corpus["list_sha"],
        "heldout_rule": f"index % {HELDOUT_EVERY} == {HELDOUT_OFFSET} in the sorted list",
        "train_tokens": len(train_ids), "heldout_tokens": len(held_ids), "n_params": n_params, "n_params_mtp": n_mtp,
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "torch": torch.__version__, "steps_done": len(losses), "stopped_early": stopped_early,
        "train_minutes": round(train_minutes, 2), "total_minutes": round((time.time() - t_start) / 60, 2),
        "final_train_loss": float(np.mean(losses[-10:])) if losses else None,
        "final_mtp_loss": float(np.mean(mtp_losses[-10:])) if mtp_losses else None,
        "heldout_ppl_trained": {"ppl": ppl[0], "stderr": ppl[1], "n_tokens": ppl[2], "n_ctx": args.eval_ctx},
        "loss_curve": [round(x, 4) for x in losses], "mtp_loss_curve": [round(x, 4) for x in mtp_losses],
    }
    save_qwen35(model, cfg, args, meta)
    print(f"saved to {args.out} in {meta['total_minutes']} min", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
