"""The NumPy backend: a next-token MLP language model trained with Adam, on CPU, deterministic.

Data: a synthetic corpus drawn once from a seeded Markov chain over ``vocab`` tokens (each token has a few
likely successors, so the loss falls towards the chain's entropy). Each step draws ``batch`` windows of
``seq_len + 1`` tokens at offsets from a seeded ``numpy.random.Generator``; that generator's state is the data
order, and it is saved in every checkpoint with the parameters and Adam's moments, so a resumed run draws the
same batches and follows the same loss trajectory as an uninterrupted one.

Updates are functional (every step makes new arrays and never writes into the old ones), so a snapshot for
an asynchronous checkpoint is the current arrays themselves: taking it costs no copy, and the writer thread
reads arrays that the training loop no longer touches.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import IO, Any

from placement.trainer.checkpoint import FileWriter
from placement.trainer.settings import ModelConfig

STATE_FILE = "state.npys"  # .npy records one after another (snapshot)
CORPUS_TOKENS = 1 << 16  # tokens in the synthetic corpus
SUCCESSORS = 4  # likely next tokens per token in the Markov chain
CHAINS = 1024  # chains drawn side by side
BETA1, BETA2, EPS = 0.9, 0.999, 1e-8  # Adam


class NumpyModel:
    """Embedding (vocab × hidden), ``layers`` tanh layers (hidden × hidden), output (hidden × vocab)."""

    name = "numpy"
    device = "cpu"
    accelerator = "CPU"
    world = 1  # processes training together (the NumPy backend trains alone in its process)

    def __init__(self, cfg: ModelConfig, seed: int) -> None:
        import numpy as np

        self.np = np
        self.cfg = cfg
        self.seed = seed
        init = np.random.default_rng([seed, 1])
        h, v = cfg.hidden, cfg.vocab
        params: dict[str, Any] = {"embed": init.normal(0, 1.0, (v, h)).astype(np.float32)}
        for i in range(cfg.layers):
            params[f"w{i}"] = init.normal(0, 1 / np.sqrt(h), (h, h)).astype(np.float32)
            params[f"b{i}"] = np.zeros(h, np.float32)
        params["out"] = init.normal(0, 1 / np.sqrt(h), (h, v)).astype(np.float32)
        params["out_b"] = np.zeros(v, np.float32)
        self.params = params
        self.m = {k: np.zeros_like(p) for k, p in params.items()}
        self.v = {k: np.zeros_like(p) for k, p in params.items()}
        self.t = 0
        self.corpus = corpus(cfg.vocab, seed)
        self.data = np.random.default_rng([seed, 2])  # the data order: its state is checkpointed

    # ---- one step
    def batch(self) -> tuple[Any, Any]:
        """(inputs, targets), each ``batch × seq_len`` token ids, from the data generator."""
        np, cfg = self.np, self.cfg
        starts = self.data.integers(0, len(self.corpus) - cfg.seq_len - 1, cfg.batch)
        windows = self.corpus[starts[:, None] + np.arange(cfg.seq_len + 1)[None, :]]
        return windows[:, :-1], windows[:, 1:]

    def train_step(self) -> float:
        """One Adam step on the next batch; returns its loss (mean cross-entropy, nats) before the update."""
        np, p, cfg = self.np, self.params, self.cfg
        x, y = self.batch()
        x, y = x.reshape(-1), y.reshape(-1)
        n = len(x)
        acts = [p["embed"][x]]
        for i in range(cfg.layers):
            acts.append(np.tanh(acts[-1] @ p[f"w{i}"] + p[f"b{i}"]))
        logits = acts[-1] @ p["out"] + p["out_b"]
        logits = logits - logits.max(axis=1, keepdims=True)
        exp = np.exp(logits)
        probs = exp / exp.sum(axis=1, keepdims=True)
        loss = float(-np.log(probs[np.arange(n), y] + 1e-12).mean())
        d = probs
        d[np.arange(n), y] -= 1.0
        d /= n
        grads: dict[str, Any] = {"out": acts[-1].T @ d, "out_b": d.sum(axis=0)}
        dh = d @ p["out"].T
        for i in reversed(range(cfg.layers)):
            dz = dh * (1.0 - acts[i + 1] ** 2)
            grads[f"w{i}"] = acts[i].T @ dz
            grads[f"b{i}"] = dz.sum(axis=0)
            dh = dz @ p[f"w{i}"].T
        g_embed = np.zeros_like(p["embed"])
        np.add.at(g_embed, x, dh)
        grads["embed"] = g_embed
        self.t += 1
        lr = cfg.lr * np.sqrt(1 - BETA2 ** self.t) / (1 - BETA1 ** self.t)
        new_p, new_m, new_v = {}, {}, {}
        for k, g in grads.items():  # functional: new arrays, the old ones stay as a snapshot saw them
            new_m[k] = BETA1 * self.m[k] + (1 - BETA1) * g
            new_v[k] = BETA2 * self.v[k] + (1 - BETA2) * g * g
            new_p[k] = (p[k] - lr * new_m[k] / (np.sqrt(new_v[k]) + EPS)).astype(np.float32)
        self.params, self.m, self.v = new_p, new_m, new_v
        return loss

    # ---- checkpoints
    def snapshot(self) -> tuple[dict[str, FileWriter], dict[str, Any]]:
        """(files, state) for a checkpoint now: no copy (updates are functional).

        ``state.npys`` is the arrays' ``.npy`` records one after another, in the order ``state["arrays"]``
        names them (``numpy.lib.format.read_array`` reads each in turn). Unlike ``.npz`` (a zip: a CRC and
        two copies of every byte), the writer thread hands each array's memory to the file as it is: half
        the CPU time, which the training thread shares."""
        arrays = {**{f"param/{k}": a for k, a in self.params.items()},
                  **{f"adam_m/{k}": a for k, a in self.m.items()},
                  **{f"adam_v/{k}": a for k, a in self.v.items()}}
        fmt = self.np.lib.format

        def write(f: IO[bytes]) -> None:
            for a in arrays.values():
                fmt.write_array_header_2_0(f, fmt.header_data_from_array_1_0(a))
                f.write(memoryview(self.np.ascontiguousarray(a)).cast("B"))

        state = {"adam_t": self.t, "data_rng": self.data.bit_generator.state, "arrays": list(arrays),
                 "seed": self.seed}
        return {STATE_FILE: write}, state

    def restore(self, files: Mapping[str, bytes], state: Mapping[str, Any]) -> None:
        """Load a checkpoint of this model; ValueError (or KeyError, TypeError) when it does not fit: another
        configuration, another seed (its corpus is another), a malformed state."""
        np = self.np
        check_seed(state, self.seed)
        names = state["arrays"]
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise ValueError("the checkpoint's state.arrays is not a list of names")
        stream = io.BytesIO(files[STATE_FILE])
        arrays = {name: np.lib.format.read_array(stream, allow_pickle=False) for name in names}
        for prefix, target in (("param/", self.params), ("adam_m/", self.m), ("adam_v/", self.v)):
            for k in list(target):
                a = arrays.get(prefix + k)
                if a is None or a.shape != target[k].shape:
                    raise ValueError(f"the checkpoint's {prefix}{k} does not fit this model configuration")
                target[k] = a
        t = state["adam_t"]
        if isinstance(t, bool) or not isinstance(t, int) or t < 0:
            raise ValueError("the checkpoint's state.adam_t is not a step count")
        self.t = t
        self.data.bit_generator.state = state["data_rng"]


def check_seed(state: Mapping[str, Any], seed: int) -> None:
    """ValueError when the checkpoint was trained with another ``--seed``: the seed draws the corpus and the
    data order, so resuming it with another would train one seed's state on another's data. (A checkpoint
    from before the seed was recorded is taken as it is.)"""
    got = state.get("seed", seed)
    if got != seed:
        raise ValueError(f"it was trained with --seed {str(got)[:40]}, this run has --seed {seed}; resume with "
                         f"--seed {str(got)[:40]}")


def corpus(vocab: int, seed: int) -> Any:
    """``CORPUS_TOKENS`` tokens from a seeded Markov chain: each token is followed by one of its
    ``SUCCESSORS`` likely successors (probabilities 0.5, 0.25, ...) or, rarely, any token. Drawn as
    ``CHAINS`` chains side by side (one vectorised draw per position), concatenated."""
    import numpy as np

    rng = np.random.default_rng([seed, 0])
    succ = rng.integers(0, vocab, (vocab, SUCCESSORS))
    weights = np.array([0.5 ** (i + 1) for i in range(SUCCESSORS)])
    length = CORPUS_TOKENS // CHAINS
    choice = rng.choice(SUCCESSORS, (length, CHAINS), p=weights / weights.sum())
    noise = rng.random((length, CHAINS)) < 0.05
    random_tok = rng.integers(0, vocab, (length, CHAINS))
    out = np.empty((length, CHAINS), np.int64)
    tok = random_tok[0]
    for i in range(length):
        tok = np.where(noise[i], random_tok[i], succ[tok, choice[i]])
        out[i] = tok
    return out.T.reshape(-1)
