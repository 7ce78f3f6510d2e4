"""Command lines the way llama.cpp users type them, checked before click parses them.

click already reads a declared multi-letter short flag (``-ub``, ``-sys``, ``-cnv``) as itself.
An undeclared one would be split into a short flag and its value (``-ngl 99`` -> ``-n gl``),
so llama.cpp's flags that toolkit does not have are caught here by name, with the reason, and
exit 2: ``not supported: -ngl (toolkit runs on CPU)``.  Also here: the check of ``TOOLKIT_CPU``,
and llama.cpp's escape processing.
"""
from __future__ import annotations

import re

from toolkit.errors import InputError

_MULTI_SHORT = re.compile(r"^-[A-Za-z][A-Za-z0-9-]+$")

_GPU = "toolkit runs on CPU"

# llama.cpp's common/arg.cpp flags, by spelling, that toolkit does not have, and why
UNSUPPORTED: dict[str, str] = {
    **dict.fromkeys(("-ngl", "--gpu-layers", "--n-gpu-layers", "-ngld", "--gpu-layers-draft",
                     "-sm", "--split-mode", "-ts", "--tensor-split", "-mg", "--main-gpu",
                     "-dev", "--device", "-nkvo", "--no-kv-offload", "--no-op-offload",
                     "-cmoe", "--cpu-moe", "-ncmoe", "--n-cpu-moe", "-ot", "--override-tensor"), _GPU),
    **dict.fromkeys(("-fa", "--flash-attn"), "toolkit has one attention kernel; it needs no switch"),
    **dict.fromkeys(("-lcs", "--lookup-cache-static", "-lcd", "--lookup-cache-dynamic"),
                    "no n-gram cache files (--lookup drafts from the context itself)"),
    **dict.fromkeys(("--lora", "--lora-scaled", "--control-vector", "--control-vector-scaled"),
                    "no adapters yet"),
    **dict.fromkeys(("-hf", "-hfr", "--hf-repo", "-hff", "--hf-file", "-mu", "--model-url"),
                    "toolkit does not download; give a local GGUF with -m"),
    **dict.fromkeys(("--mlock", "--numa", "-dio", "--direct-io"), "not on this runtime"),
    **dict.fromkeys(("-dt", "--defrag-thold", "-kvu", "--kv-unified", "-np", "--parallel"),
                    "one sequence per run"),
    **dict.fromkeys(("--rope-scaling", "--rope-scale", "--rope-freq-base", "--rope-freq-scale",
                     "--yarn-orig-ctx", "--yarn-ext-factor", "--yarn-attn-factor",
                     "--yarn-beta-slow", "--yarn-beta-fast"), "RoPE settings come from the GGUF"),
    **dict.fromkeys(("--mirostat", "--mirostat-lr", "--mirostat-ent", "--dry-multiplier",
                     "--dry-base", "--dry-allowed-length", "--dry-penalty-last-n",
                     "--dry-sequence-breaker", "--xtc-probability", "--xtc-threshold",
                     "--typical", "--top-nsigma", "--dynatemp-range", "--dynatemp-exp",
                     "--samplers", "--sampling-seq", "--sampler-seq", "-l", "--logit-bias"),
                    "toolkit's sampler chain is top-k, top-p, min-p, temperature and the penalties"),
    **dict.fromkeys(("-i", "--interactive", "-if", "--interactive-first", "--in-prefix",
                     "--in-suffix", "--in-prefix-bos", "-mli", "--multiline-input"),
                    "use -cnv/--conversation (toolkit chat)"),
    **dict.fromkeys(("-ps", "--prompt-cache", "--prompt-cache-all", "--prompt-cache-ro"),
                    "use --session FILE"),
    **dict.fromkeys(("-cb", "--cont-batching", "-nocb", "--no-cont-batching"),
                    "continuous batching is the server's: toolkit serve always does it"),
    **dict.fromkeys(("--color", "-co"), "toolkit prints plain text: the prompt and the answer are not coloured"),
}

# llama.cpp habits that change nothing here, accepted and dropped before click parses the line
# (command -> spellings; a command's own declared option of the same name wins): warm-up runs,
# logging and the performance printout are llama.cpp's; toolkit's output is already what
# --simple-io asks for (plain reads and writes, for subprocesses); serve always batches
# continuously (llama-server's -cb)
_NOOPS = ("--no-warmup", "--log-disable", "--no-perf", "--simple-io")
NOOPS: dict[str, tuple[str, ...]] = {
    **dict.fromkeys(("run", "chat", "bench", "perplexity"), _NOOPS),
    "serve": _NOOPS + ("-cb", "--cont-batching"),
}

# the commands that run a model and so take llama.cpp's model flags
_MODEL_COMMANDS = ("run", "chat", "bench", "perplexity", "serve")

# serve: llama-server's spelling of a flag it declares itself (-np) is its own; the chat and
# prompt-cache groups are llama-cli's, not the server's (plain unknown options there); and
# these get the server's reason
_INTERACTIVE = {f for f, why in UNSUPPORTED.items() if why.startswith(("use -cnv", "use --session"))}
_SERVE_REASONS = {**dict.fromkeys(("-kvu", "--kv-unified"), "the slots already share one KV cache of -c cells"),
                  **dict.fromkeys(("-dt", "--defrag-thold"), "no defragmentation: cells are reused in place"),
                  **dict.fromkeys(("-nocb", "--no-cont-batching"), "toolkit serve always batches continuously")}


def unsupported(flag: str, cmd: str, declared) -> str | None:
    """Why ``cmd`` refuses llama.cpp's ``flag``, or None when it is not one of those
    (``declared``: the command's own option spellings, which always win)."""
    if cmd not in _MODEL_COMMANDS or flag in (declared or ()) or flag not in UNSUPPORTED:
        return None
    if cmd == "serve":
        if flag in _INTERACTIVE:
            return None
        return _SERVE_REASONS.get(flag, UNSUPPORTED[flag])
    return UNSUPPORTED[flag]

CPU_LEVELS = ("scalar", "avx2", "avx2-novnni", "avx512", "neon")   # avx2-novnni: avx2 without AVX-VNNI


def check_argv(argv: list[str], known: dict[str, dict[str, bool]] | None = None) -> list[str]:
    """``argv`` (without the program name) as click should see it: the no-op habits of
    :data:`NOOPS` dropped, and ``--version`` given to any command as the root's ``--version``.

    Raises InputError
    ``not supported: FLAG (why)`` for a llama.cpp flag toolkit does not have, given to a
    command that runs a model, and ``no such option: -xyz`` for any other multi-letter short
    flag the command does not declare (``known``: command -> {option spelling: takes a value}),
    which click would split into ``-x yz``.  Nothing after ``--`` is looked at (prompt text),
    nor the value of an option (``-p -text``).
    """
    argv = list(argv)
    cmd_at = next((i for i, a in enumerate(argv) if not a.startswith("-")), None)
    if cmd_at is None:
        return argv
    cmd = argv[cmd_at]
    opts = (known or {}).get(cmd)
    skip = False
    out = argv[:cmd_at + 1]
    for i, a in enumerate(argv[cmd_at + 1:], cmd_at + 1):
        if skip:
            skip = False
            out.append(a)
            continue
        if a == "--":
            out += argv[i:]
            break
        flag = a.split("=", 1)[0]
        skip = bool(opts and opts.get(flag) and "=" not in a)
        if opts is not None and flag not in opts:
            if a == "--version":   # every command: toolkit's version (the root option prints it)
                return ["--version"]
            if a in NOOPS.get(cmd, ()):
                continue
        why = unsupported(flag, cmd, opts)
        if why is not None:
            raise InputError(f"not supported: {flag} ({why})")
        if opts is not None and _MULTI_SHORT.match(flag) and flag not in opts:
            raise InputError(no_such_option(flag, cmd, opts))
        out.append(a)
    return out


def no_such_option(flag: str, cmd: str | None, opts) -> str:
    """``no such option: FLAG`` and either ``(did you mean X?)``, for a close spelling only, or
    ``(toolkit CMD -h lists the options)``; ``opts``: the command's option spellings."""
    import difflib
    close = difflib.get_close_matches(flag, [o for o in (opts or ()) if o.startswith("-")], n=1, cutoff=0.8)
    prog = f"toolkit {cmd}" if cmd else "toolkit"
    return f"no such option: {flag} " + (f"(did you mean {close[0]}?)" if close else f"({prog} -h lists the options)")


def check_cpu_env(environ) -> None:
    """``TOOLKIT_CPU`` (the kernel level cap) must name a level: the binding would take a
    mistyped one as "scalar", a silent 3-5x slowdown; the runtime options' variables
    (``TOOLKIT_REPACK``, ``TOOLKIT_BF16_GEMM``, ``TOOLKIT_*_MIN``: toolkit.runtime.options) must
    have one of their values.  Raises InputError naming the variable."""
    v = environ.get("TOOLKIT_CPU")
    if v and v not in CPU_LEVELS:
        raise InputError(f"TOOLKIT_CPU={v!r} is not a kernel level; use one of {', '.join(CPU_LEVELS)} "
                         f"(or unset it for the best this machine runs)")
    from toolkit.runtime.options import RuntimeOptions
    RuntimeOptions.from_env(environ)


def process_escapes(text: str, what: str = "prompt") -> str:
    """llama.cpp's ``string_process_escapes`` (common/common.cpp), on the UTF-8 bytes:
    ``\\n \\r \\t \\' \\" \\\\`` and ``\\xHH`` (one byte); any other ``\\c`` stays as it is.

    Raises:
        InputError: the result is not valid UTF-8 (a ``\\xHH`` byte that starts no character).
    """
    if "\\" not in text:
        return text
    src = text.encode("utf-8", "surrogateescape")
    out = bytearray()
    simple = {ord("n"): b"\n", ord("r"): b"\r", ord("t"): b"\t", ord("'"): b"'", ord('"'): b'"', ord("\\"): b"\\"}
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if c != 0x5C or i + 1 >= n:
            out.append(c)
            i += 1
            continue
        e = src[i + 1]
        if e in simple:
            out += simple[e]
            i += 2
            continue
        if e == ord("x") and i + 3 < n and _is_hex(src[i + 2:i + 4]):
            out.append(int(src[i + 2:i + 4], 16))
            i += 4
            continue
        out += src[i:i + 2]
        i += 2
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{what} is not valid UTF-8 after escape processing (byte {e.start}; "
                         f"--no-escape keeps backslashes as typed)") from None


def _is_hex(b: bytes) -> bool:
    return len(b) == 2 and all(chr(x) in "0123456789abcdefABCDEF" for x in b)
