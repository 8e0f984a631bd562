"""The workloads of ``optimizer_race.py``: data, models and losses, CPU-sized and built without downloads.

Each workload is a :class:`Workload`: ``build(seed)`` returns the model (seeded initialisation),
an endless stream of seeded mini-batches ``(inputs, targets)``, the loss, and fixed evaluation
sets of the training and the validation data.  Data: scikit-learn's 8x8 digits, and a character
corpus made from the sources of Python standard-library modules present in every supported
Python (so the text is fixed for a given Python version).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import torch

F = torch.nn.functional
Batch = Tuple[torch.Tensor, torch.Tensor]

#: single-file standard-library modules of Python 3.10 - 3.13, the text corpus
CORPUS_MODULES = ("argparse", "dataclasses", "functools", "textwrap", "string", "heapq", "bisect", "fractions",
                  "statistics", "difflib", "shlex", "calendar", "fnmatch", "glob", "queue", "sched")
IGNORE = -100   # torch's ignore_index: masked positions carry no target


@dataclass
class Task:
    model: torch.nn.Module
    batches: Iterator[Batch]
    loss: Callable[[Any, torch.Tensor], torch.Tensor]   # (model output, targets) -> mean loss
    train_eval: List[Batch]
    val_eval: List[Batch]


@dataclass
class Workload:
    name: str
    build: Callable[[int], Task]
    steps: int                    # the budget
    output_metric: str            # what infogeo's Fisher is built from
    describe: str
    eval_every: int = 0           # 0: steps // 30
    needs: Optional[str] = None   # a package the model needs (the workload is skipped without it)
    core: bool = True             # one of issue 22's five workloads (raced by default, counted by the verdict)

    def __post_init__(self):
        self.eval_every = self.eval_every or max(1, self.steps // 30)


# ------------------------------------------------------------------ data
@functools.lru_cache(maxsize=None)
def digits(val_fraction: float = 0.2) -> Tuple[torch.Tensor, ...]:
    """Digits in [0, 1], a fixed split: ``(X_train, y_train, X_val, y_val)``."""
    from sklearn.datasets import load_digits
    d = load_digits()
    X = torch.tensor(d.data, dtype=torch.float32) / 16.0
    y = torch.tensor(d.target)
    perm = torch.randperm(len(X), generator=torch.Generator().manual_seed(1234))
    n = int(round((1 - val_fraction) * len(X)))
    return X[perm[:n]], y[perm[:n]], X[perm[n:]], y[perm[n:]]


@functools.lru_cache(maxsize=None)
def corpus() -> Tuple[torch.Tensor, torch.Tensor]:
    """ASCII codes (non-ASCII characters as ``?``) of the corpus modules' sources: (train 90 %, validation 10 %).
    Read from the standard library's own directory, not imported: a file of the same name in the working directory
    (a script called ``sched.py``) would otherwise be the one read, and the text would change unnoticed."""
    import sysconfig
    from pathlib import Path
    std = Path(sysconfig.get_paths()["stdlib"])
    text = "\n".join((std / f"{m}.py").read_text(encoding="utf-8") for m in CORPUS_MODULES)
    codes = torch.tensor([c if c < 128 else ord("?") for c in text.encode("ascii", "replace")], dtype=torch.long)
    n = int(0.9 * len(codes))
    return codes[:n], codes[n:]


def _minibatches(X: torch.Tensor, y: torch.Tensor, batch: int, seed: int) -> Iterator[Batch]:
    """Epochs of seeded random permutations, ``(X, y)`` mini-batches."""
    g = torch.Generator().manual_seed(10_000 + seed)
    while True:
        perm = torch.randperm(len(X), generator=g)
        for i in range(0, len(X) - batch + 1, batch):
            idx = perm[i:i + batch]
            yield X[idx], y[idx]


def _windows(codes: torch.Tensor, context: int, batch: int, g: torch.Generator) -> torch.Tensor:
    start = torch.randint(0, len(codes) - context - 1, (batch,), generator=g)
    return codes[start[:, None] + torch.arange(context + 1)]


def _text_stream(codes, context, batch, seed, make) -> Iterator[Batch]:
    g = torch.Generator().manual_seed(10_000 + seed)
    while True:
        yield make(_windows(codes, context, batch, g), g)


def _fixed(codes, context, batch, count, make, seed) -> List[Batch]:
    g = torch.Generator().manual_seed(seed)
    return [make(_windows(codes, context, batch, g), g) for _ in range(count)]


def _split(X: torch.Tensor, y: torch.Tensor, size: int) -> List[Batch]:
    return [(X[i:i + size], y[i:i + size]) for i in range(0, len(X), size)]


# ------------------------------------------------------------------ models
def _mlp(sizes, act=torch.nn.Tanh) -> torch.nn.Sequential:
    layers: List[torch.nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(torch.nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(act())
    return torch.nn.Sequential(*layers)


class Block(torch.nn.Module):
    """Pre-norm transformer block (causal or bidirectional attention, GELU MLP)."""

    def __init__(self, d: int, heads: int, causal: bool):
        super().__init__()
        self.heads, self.causal = heads, causal
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.fc1, self.fc2 = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x):
        N, T, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).reshape(N, T, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        att = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        x = x + self.proj(att.transpose(1, 2).reshape(N, T, D))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class CharTransformer(torch.nn.Module):
    """Token and position embeddings, ``layers`` blocks, a final norm and a linear read-out: (N, T) -> (N, T, V)."""

    def __init__(self, vocab: int, d: int, layers: int, heads: int, context: int, causal: bool = True):
        super().__init__()
        self.tok, self.pos = torch.nn.Embedding(vocab, d), torch.nn.Embedding(context, d)
        self.blocks = torch.nn.Sequential(*[Block(d, heads, causal) for _ in range(layers)])
        self.ln, self.head = torch.nn.LayerNorm(d), torch.nn.Linear(d, vocab)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        return self.head(self.ln(self.blocks(x)))


class RowGRU(torch.nn.Module):
    """A GRU over the 8 rows of an 8x8 digit (hidden 64), a linear read-out of its last state: no layer rule gives
    the GRU Kronecker factors."""

    def __init__(self):
        super().__init__()
        self.rnn, self.head = torch.nn.GRU(8, 64, batch_first=True), torch.nn.Linear(64, 10)

    def forward(self, x):
        return self.head(self.rnn(x.reshape(-1, 8, 8))[0][:, -1])


class TinyGPT2(torch.nn.Module):
    """A Hugging Face ``GPT2LMHeadModel`` from a config (2 layers, width 64, 4 heads, the 128 ASCII codes as its
    vocabulary, the read-out tied to the token embedding), called with keywords: (N, T) -> logits (N, T, V)."""

    def __init__(self, context: int):
        super().__init__()
        import transformers
        cfg = transformers.GPT2Config(vocab_size=128, n_positions=context, n_embd=64, n_layer=2, n_head=4,
                                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0,
                                      eos_token_id=0)   # GPT-2's 50256 lies outside this vocabulary
        self.lm = transformers.GPT2LMHeadModel(cfg)

    def forward(self, idx):
        return self.lm(input_ids=idx, use_cache=False).logits


class EncoderLM(torch.nn.Module):
    """``torch.nn.TransformerEncoder`` (2 pre-norm layers, width 64, 4 heads, causal mask) between token and
    position embeddings and a linear read-out: ``nn.MultiheadAttention`` reads its projections' weights
    itself, so no layer rule factors them."""

    def __init__(self, vocab: int = 128, d: int = 64, context: int = 48):
        super().__init__()
        self.tok, self.pos = torch.nn.Embedding(vocab, d), torch.nn.Embedding(context, d)
        layer = torch.nn.TransformerEncoderLayer(d, 4, 4 * d, dropout=0.0, batch_first=True, norm_first=True)
        self.enc = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = torch.nn.Linear(d, vocab)
        self.register_buffer("mask", torch.nn.Transformer.generate_square_subsequent_mask(context))

    def forward(self, idx):
        T = idx.shape[1]
        h = self.tok(idx) + self.pos(torch.arange(T, device=idx.device))
        return self.head(self.enc(h, mask=self.mask[:T, :T], is_causal=True))


class DepthwiseCNN(torch.nn.Module):
    """conv 3x3 (16) - depthwise 3x3 stride 2 (groups 16) - pointwise 1x1 (32) - linear (10), ReLU, on 8x8 digits:
    the depthwise layer has no Kronecker rule."""

    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(1, 16, 3, padding=1)
        self.dw = torch.nn.Conv2d(16, 16, 3, padding=1, stride=2, groups=16)
        self.pw = torch.nn.Conv2d(16, 32, 1)
        self.fc = torch.nn.Linear(32 * 16, 10)

    def forward(self, x):
        x = F.relu(self.c1(x.reshape(-1, 1, 8, 8)))
        return self.fc(F.relu(self.pw(F.relu(self.dw(x)))).flatten(1))


class DigitsCNN(torch.nn.Module):
    """conv 3x3 (16) - ReLU - conv 3x3 stride 2 (32) - ReLU - linear (10) on 8x8 digits."""

    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(1, 16, 3, padding=1)
        self.c2 = torch.nn.Conv2d(16, 32, 3, stride=2, padding=1)
        self.fc = torch.nn.Linear(32 * 16, 10)

    def forward(self, x):
        x = x.reshape(-1, 1, 8, 8)
        return self.fc(F.relu(self.c2(F.relu(self.c1(x)))).flatten(1))


# ------------------------------------------------------------------ workloads
def _token_ce(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1), ignore_index=IGNORE)


def _classifier(seed: int) -> Task:
    Xt, yt, Xv, yv = digits()
    torch.manual_seed(seed)
    return Task(_mlp([64, 256, 256, 10]), _minibatches(Xt, yt, 128, seed), F.cross_entropy,
                [(Xt, yt)], [(Xv, yv)])


def _bce(out, x):
    return F.binary_cross_entropy_with_logits(out, x, reduction="sum") / len(x)


def _autoencoder(seed: int) -> Task:
    Xt, _, Xv, _ = digits()
    torch.manual_seed(seed)
    return Task(_mlp([64, 256, 128, 32, 128, 256, 64]), _minibatches(Xt, Xt, 128, seed), _bce,
                [(Xt, Xt)], [(Xv, Xv)])


def _cnn(seed: int) -> Task:
    Xt, yt, Xv, yv = digits()
    torch.manual_seed(seed)
    return Task(DigitsCNN(), _minibatches(Xt, yt, 128, seed), F.cross_entropy, [(Xt, yt)], [(Xv, yv)])


def _next_char(w: torch.Tensor, g: torch.Generator) -> Batch:
    return w[:, :-1], w[:, 1:]


def _transformer(seed: int) -> Task:
    train, val = corpus()
    torch.manual_seed(seed)
    model = CharTransformer(128, 128, 2, 4, 64)
    return Task(model, _text_stream(train, 64, 32, seed, _next_char), _token_ce,
                _fixed(train, 64, 64, 4, _next_char, 1), _fixed(val, 64, 64, 4, _next_char, 2))


def _gru(seed: int) -> Task:
    Xt, yt, Xv, yv = digits()
    torch.manual_seed(seed)
    return Task(RowGRU(), _minibatches(Xt, yt, 64, seed), F.cross_entropy, [(Xt, yt)], [(Xv, yv)])


def _gpt2(seed: int) -> Task:
    train, val = corpus()
    torch.manual_seed(seed)
    return Task(TinyGPT2(48), _text_stream(train, 48, 16, seed, _next_char), _token_ce,
                _fixed(train, 48, 64, 2, _next_char, 1), _fixed(val, 48, 64, 2, _next_char, 2))


def _encoder(seed: int) -> Task:
    train, val = corpus()
    torch.manual_seed(seed)
    return Task(EncoderLM(), _text_stream(train, 48, 16, seed, _next_char), _token_ce,
                _fixed(train, 48, 64, 2, _next_char, 1), _fixed(val, 48, 64, 2, _next_char, 2))


def _depthwise(seed: int) -> Task:
    Xt, yt, Xv, yv = digits()
    torch.manual_seed(seed)
    return Task(DepthwiseCNN(), _minibatches(Xt, yt, 128, seed), F.cross_entropy, [(Xt, yt)], [(Xv, yv)])


MASK = 127   # the DEL code, absent from source text: the mask token


def _masked(w: torch.Tensor, g: torch.Generator) -> Batch:
    """Masked-character model: 15 % of the positions are replaced by the mask token and predicted;
    every other position is ignored (``ignore_index``)."""
    x = w[:, :-1].clone()
    chosen = torch.rand(x.shape, generator=g) < 0.15
    y = torch.where(chosen, x, torch.full_like(x, IGNORE))
    x[chosen] = MASK
    return x, y


def _masked_lm(seed: int) -> Task:
    train, val = corpus()
    torch.manual_seed(seed)
    model = CharTransformer(128, 64, 1, 4, 32, causal=False)
    return Task(model, _text_stream(train, 32, 64, seed, _masked), _token_ce,
                _fixed(train, 32, 256, 2, _masked, 1), _fixed(val, 32, 256, 2, _masked, 2))


WORKLOADS: Dict[str, Workload] = {w.name: w for w in (
    Workload("classifier", _classifier, 600, "categorical", "digits MLP 64-256-256-10 (tanh), batch 128"),
    Workload("autoencoder", _autoencoder, 800, "bernoulli",
             "digits autoencoder 64-256-128-32-128-256-64 (tanh), Bernoulli loss, batch 128"),
    Workload("transformer", _transformer, 150, "categorical",
             "character transformer, 2 layers, d 128, 4 heads, context 64, batch 32, Python-source text"),
    Workload("cnn", _cnn, 400, "categorical", "digits CNN conv16-conv32/2-linear, ReLU, batch 128"),
    Workload("masked", _masked_lm, 300, "categorical",
             "masked-character model, 1 bidirectional attention layer, d 64, context 32, batch 64, "
             "15 % of positions predicted, the rest ignore_index"),
    # beyond the five: layers without Kronecker factors (a GRU; GPT-2's tied embedding)
    Workload("gru", _gru, 400, "categorical", "GRU 64 over the rows of 8x8 digits, linear read-out, batch 64",
             core=False),
    Workload("gpt2", _gpt2, 200, "categorical", "Hugging Face GPT-2 from a config, 2 layers, width 64, tied "
             "embedding, ASCII vocabulary, context 48, batch 16, Python-source text", needs="transformers",
             core=False),
    Workload("encoder", _encoder, 200, "categorical", "torch.nn.TransformerEncoder character model, 2 layers, "
             "width 64, 4 heads, causal, context 48, batch 16", core=False),
    Workload("depthwise", _depthwise, 400, "categorical", "digits CNN conv16-depthwise/2-pointwise32-linear, ReLU, "
             "batch 128", core=False),
)}


def evaluate(task: Task, data: List[Batch]) -> float:
    """Mean loss over the evaluation batches (no gradients)."""
    with torch.no_grad():
        return float(sum(task.loss(task.model(x), y) for x, y in data) / len(data))


def finite(value: float) -> bool:
    return math.isfinite(value)
