"""The training loop and its pieces: batches, the learning-rate schedule, the optimizer, evaluation.

One step:  x, y = get_batch(...)            random windows of the token stream, y = x shifted by one
                                            (chat: ChatRows.sample, one whole conversation per row)
           loss = cross_entropy(model(x), y)  (positions labelled -100 are skipped: the chat loss mask)
           loss.backward(); clip the gradient norm; AdamW step with lr = lr_at(step)

A notebook calls the same pieces: `train(model, train_ids, val_ids, TrainConfig(steps=50))` returns the
loss history. Under torchrun (see `tinylm.distributed`) `train` wraps the model in DistributedDataParallel,
gives each process its rows of the same global batch, and only rank 0 logs and writes checkpoints;
`evaluate` splits its batches between the processes and adds up the results.
"""

from __future__ import annotations

import math
import time
import warnings
from contextlib import nullcontext
from pathlib import Path
from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from .. import distributed
from .._checks import IGNORE_INDEX, check_int, check_number
from ..config import Config
from ..model import TinyLM
from ..optim import decays
from ..tokenizer import BPETokenizer
from .checkpoint import Checkpoint, restore_optimizer, save_checkpoint
from .settings import History, TrainConfig, check_lr


def lr_at(step: int, peak: float, min_lr: float, warmup: int, total: int, progress: float | None = None) -> float:
    """Learning rate of step (0-based): linear warmup, then cosine decay (Loshchilov & Hutter, 2017).

        step < warmup    peak * (step + 1) / warmup             peak / warmup at step 0, peak at step warmup - 1
        step >= warmup   min_lr + (peak - min_lr) * (1 + cos(pi * t)) / 2,   t = (step - warmup) / (total - 1 - warmup)
                         t runs from 0 (peak, at step warmup) to 1 (min_lr, at the last step total - 1);
                         steps past the end stay at min_lr
    progress: with a wall-clock budget, t is given instead (the share of the budget spent since warmup ended,
    `time_progress`), so the cosine spans the minutes, not a step count.
    """
    check_lr(peak, min_lr)
    if step < warmup:
        return peak * (step + 1) / warmup
    t = (step - warmup) / max(1, total - 1 - warmup) if progress is None else progress
    t = min(1.0, max(0.0, t))
    return min_lr + (peak - min_lr) * 0.5 * (1.0 + math.cos(math.pi * t))


def time_progress(elapsed: float, budget: float, warmup_end: float) -> float:
    """The cosine's t under a wall-clock budget: 0 when warmup ended (at warmup_end seconds), 1 at the budget."""
    return (elapsed - warmup_end) / max(1e-9, budget - warmup_end)


def get_batch(tokens: torch.Tensor, batch_size: int, seq_len: int, generator: torch.Generator | None = None,
              labels: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """batch_size random windows of a 1-D token stream: x (B, T) and the next tokens y (B, T).

    y[b, t] = tokens[s + t + 1] for a window starting at s, or labels[s + t + 1] when labels (the same
    length as tokens, -100 where not supervised) are given. Draws the starts from generator.
    """
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 1:
        raise ValueError("tokens must be a 1-D tensor of token ids (the whole stream)")
    if len(tokens) < seq_len + 1:
        raise ValueError(f"tokens has {len(tokens)} ids, fewer than seq_len + 1 = {seq_len + 1}; use a shorter seq_len")
    if labels is not None and labels.shape != tokens.shape:
        raise ValueError(f"labels must have the shape of tokens {tuple(tokens.shape)}, got {tuple(labels.shape)}")
    targets = tokens if labels is None else labels
    starts = torch.randint(len(tokens) - seq_len, (batch_size,), generator=generator)  # (B,)
    offsets = torch.arange(seq_len)                                                     # (T,)
    pos = starts[:, None] + offsets[None, :]                                            # (B, T)
    return tokens[pos], targets[pos + 1]


def pad_conversations(encoded: Sequence[tuple[list[int], list[int]]], seq_len: int | None = None,
                      pad_id: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """One conversation per row, padded on the right: x (B, T) token ids and y (B, T) next-token labels.

    encoded: (ids, labels) pairs as `tinylm.chat.encode_chat` makes them. x[b, t] = ids[t] and
    y[b, t] = labels[t + 1]: the assistant's tokens, IGNORE_INDEX everywhere else and on the padding.
    T is the longest conversation minus one, at most seq_len (a longer one keeps its first seq_len + 1 tokens).

        x  <bos> <|user|> Hi <|assistant|> Hello  <eos>  pad    pad       (pad_id: never seen, never scored)
        y  -100  -100   -100  Hello       <eos>  -100   -100   -100

    No attention crosses conversations: a row holds one, and with the padding on the right every real token
    comes before every pad, so the causal mask alone keeps pads out of what real tokens see.
    """
    if not encoded:
        raise ValueError("encoded must hold at least one (ids, labels) conversation")
    for n, (ids, labels) in enumerate(encoded):
        if len(ids) != len(labels) or len(ids) < 2:
            raise ValueError(f"conversation {n}: ids and labels must have the same length >= 2, "
                             f"got {len(ids)} and {len(labels)}")
    T = max(len(ids) for ids, _ in encoded) - 1
    if seq_len is not None:
        T = min(T, check_int("seq_len", seq_len, low=1))
    x = torch.full((len(encoded), T), check_int("pad_id", pad_id, low=0), dtype=torch.long)   # (B, T)
    y = torch.full((len(encoded), T), IGNORE_INDEX, dtype=torch.long)                         # (B, T)
    for b, (ids, labels) in enumerate(encoded):
        n = min(len(ids) - 1, T)
        x[b, :n] = torch.tensor(ids[:n])
        y[b, :n] = torch.tensor(labels[1 : n + 1])
    return x, y


class Objective:
    """A training signal other than next-token cross-entropy, given to `train` in place of the token stream:
    the loop stays the same (schedule, clipping, divergence checks, --minutes, on_eval), only the loss differs.

    step_loss(model, batch_size, generator) draws its own batch with generator (the loop's seeded sampler) and
    returns (loss, tokens): the scalar loss to minimise, with its graph, and the tokens it ran through the model.
    Subclasses: `tinylm.dpo.DPOObjective` (preference pairs), `tinylm.grpo.GRPOObjective` (sampled groups).
    """

    def step_loss(self, model: TinyLM, batch_size: int, generator: torch.Generator) -> tuple[torch.Tensor, int]:
        raise NotImplementedError


class ChatRows:
    """Conversations for chat fine-tuning, one whole conversation per batch row (not windows of a stream).

    rows = ChatRows([encode_chat(tok, c) for c in conversations], pad_id=tok.special_ids["<eos>"])
    train(model, rows, val_rows, config) and evaluate(model, val_rows, ...) take it where they take a stream.
    """

    def __init__(self, encoded: Sequence[tuple[list[int], list[int]]], pad_id: int = 0):
        pad_conversations(encoded[:1], pad_id=pad_id)          # the argument checks, on one row
        self.encoded, self.pad_id = list(encoded), pad_id

    def __len__(self) -> int:
        return len(self.encoded)

    @property
    def n_tokens(self) -> int:
        return sum(len(ids) for ids, _ in self.encoded)

    def batch(self, rows: Sequence[int], seq_len: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """x, y (B, T) for the conversations numbered rows (`pad_conversations`)."""
        return pad_conversations([self.encoded[int(i)] for i in rows], seq_len, self.pad_id)

    def sample(self, batch_size: int, seq_len: int, generator: torch.Generator | None = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """batch_size conversations drawn at random (with replacement) from generator."""
        return self.batch(torch.randint(len(self), (batch_size,), generator=generator).tolist(), seq_len)


@torch.no_grad()
def evaluate(model: TinyLM, tokens: torch.Tensor | ChatRows, batch_size: int, seq_len: int,
             max_batches: int | None = None, labels: torch.Tensor | None = None,
             with_accuracy: bool = False) -> tuple[float, ...]:
    """Mean cross-entropy and perplexity exp(loss) on tokens -> (loss, perplexity).

    Deterministic: the stream is cut into consecutive windows of seq_len (from the start), at most
    max_batches * batch_size of them, so every evaluation scores the same positions. With labels, only
    positions whose label is not -100 count. tokens may be ChatRows instead: consecutive conversations,
    one per row. with_accuracy=True also returns the fraction of positions
    where the most likely token is the right one: (loss, perplexity, accuracy). Under torchrun every rank
    must call it: each scores every world_size-th batch and the sums are added over the ranks.
    """
    if isinstance(tokens, ChatRows):
        n = len(tokens) if max_batches is None else min(len(tokens), max_batches * batch_size)
        get = lambda i: tokens.batch(range(i, min(i + batch_size, n)), seq_len)  # noqa: E731
    else:
        if len(tokens) < seq_len + 1:
            raise ValueError(f"tokens has {len(tokens)} ids, fewer than seq_len + 1 = {seq_len + 1}; "
                             "use more validation data or a shorter seq_len")
        targets = tokens if labels is None else labels
        n = (len(tokens) - 1) // seq_len
        if max_batches is not None:
            n = min(n, max_batches * batch_size)
        x_all = tokens[: n * seq_len].view(n, seq_len)             # (N, T)
        y_all = targets[1 : n * seq_len + 1].view(n, seq_len)     # (N, T)
        get = lambda i: (x_all[i : i + batch_size], y_all[i : i + batch_size])  # noqa: E731
    device = next(model.parameters()).device
    rank, world = distributed.rank_and_world()
    was_training = model.training
    model.eval()
    loss_sum, count, correct = 0.0, 0, 0
    try:
        for i in range(rank * batch_size, n, world * batch_size):   # one process: every batch
            x, y = (t.to(device) for t in get(i))
            logits, _ = model(x)                                   # (B, T, V)
            loss_sum += F.cross_entropy(logits.flatten(0, 1).float(), y.flatten(), ignore_index=IGNORE_INDEX,
                                        reduction="sum").item()
            mask = y != IGNORE_INDEX
            count += int(mask.sum())
            correct += int(((logits.argmax(-1) == y) & mask).sum())
    finally:
        model.train(was_training)
    if world > 1:
        loss_sum, count, correct = distributed.all_reduce_sum([loss_sum, count, correct], device)
        count, correct = round(count), round(correct)
    if count == 0:
        raise ValueError("no position to score: every label in the evaluated windows is -100; "
                         "evaluate more batches (max_batches) or longer windows (seq_len)")
    loss = loss_sum / count
    ppl = math.exp(min(loss, 700.0))
    return (loss, ppl, correct / count) if with_accuracy else (loss, ppl)


@torch.no_grad()
def bits_per_byte(model: TinyLM, tokenizer: BPETokenizer, texts: Sequence[str], prefix: Sequence[int]
                  ) -> tuple[float, int, int]:
    """Bits per UTF-8 byte of texts under model -> (bits per byte, bytes, tokens).

    Each text is scored alone, after the prefix ids (what the model expects before a text: a separator, a
    <bos>): the negative log-likelihood of all its tokens, summed over the texts, / ln 2 / their bytes.
    A loss per token depends on how much text a token holds; per byte it does not, so two models with
    different tokenizers compare on the same text (as in Gao et al., 2020, The Pile). Every prefix +
    text must fit in the model's max_seq_len.
    """
    if len(prefix) < 1:
        raise ValueError("prefix must hold at least one token id: the first token of a text is predicted from it")
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    nats, n_bytes, n_tokens = 0.0, 0, 0
    try:
        for n, text in enumerate(texts):
            ids = [int(i) for i in prefix] + tokenizer.encode(text)
            if len(ids) - 1 > model.cfg.max_seq_len:
                raise ValueError(f"text {n} is {len(ids) - len(prefix)} tokens after a prefix of {len(prefix)}, "
                                 f"longer than the model's max_seq_len {model.cfg.max_seq_len}; score shorter texts")
            x = torch.tensor([ids[:-1]], device=device)                           # (1, T)
            logits = model(x)[0][0, len(prefix) - 1:].float()                     # (T_text, V)
            target = torch.tensor(ids[len(prefix):], device=device)               # (T_text,)
            nats += F.cross_entropy(logits, target, reduction="sum").item()
            n_bytes += len(text.encode("utf-8"))
            n_tokens += len(target)
    finally:
        model.train(was_training)
    if n_bytes == 0:
        raise ValueError("texts hold no bytes to score")
    return nats / math.log(2) / n_bytes, n_bytes, n_tokens


def build_model(cfg: Config, seed: int = 0, device: torch.device | str = "cpu") -> TinyLM:
    """A freshly initialised TinyLM; the same seed gives the same weights."""
    torch.manual_seed(seed)
    return TinyLM(cfg).to(device)


def make_optimizer(model: TinyLM, lr: float, weight_decay: float, betas: tuple[float, float] = (0.9, 0.95),
                   eps: float = 1e-8) -> torch.optim.AdamW:
    """AdamW (Loshchilov & Hutter, 2019) with weight decay on matrices (embedding, projections) only.

    Norm gains (1-D) are not decayed: the rule is `tinylm.optim.decays`, which the NumPy `adamw_step`
    follows too.
    """
    check_number("lr", lr, 0, low_open=True)
    check_number("weight_decay", weight_decay, 0)
    params = [p for p in model.parameters() if p.requires_grad]   # the tied embedding/head appears once
    groups = [{"params": [p for p in params if decays(p.shape)], "weight_decay": weight_decay},
              {"params": [p for p in params if not decays(p.shape)], "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps)


def split_train_val(tokens: torch.Tensor, val_fraction: float = 0.05) -> tuple[torch.Tensor, torch.Tensor]:
    """The first (1 - val_fraction) of a stream for training, the last val_fraction for validation."""
    check_number("val_fraction", val_fraction, 0, 1, low_open=True, high_open=True)
    cut = int(len(tokens) * (1 - val_fraction))
    return tokens[:cut], tokens[cut:]


class StopTraining(Exception):
    """Raised by `train`'s on_eval to end the run after this evaluation (early stopping): train returns the
    History so far, with the checkpoint of this evaluation written as usual. The message is logged."""


class TrainingDiverged(ValueError):
    """The loss or the gradient norm stopped being finite: `train` stopped before the update (and saved nothing).

    step: the step that went wrong (1-based); saved_step: the step of the last checkpoint written to
    `out` in this call or the one resumed from (None: no checkpoint).
    """

    def __init__(self, message: str, step: int, saved_step: int | None):
        super().__init__(message)
        self.step, self.saved_step = step, saved_step


def _diverged(what: str, step: int, cfg: TrainConfig, bf16: bool, kept: str, saved_step: int | None,
              before_update: bool = True) -> TrainingDiverged:
    """The error for a non-finite loss or gradient norm at step: what happened, what is kept, what to try."""
    tips = [f"a lower lr (now {cfg.lr:g})", "gradient clipping (grad_clip 1.0)" if cfg.grad_clip == 0 else
            f"a lower grad_clip (now {cfg.grad_clip:g})", f"a longer warmup (now {cfg.warmup})"]
    if bf16:
        tips.append("no bf16 autocast")
    stopped = "training stopped before this update, and" if before_update else "nothing was saved, and"
    return TrainingDiverged(f"training diverged at step {step}: {what}; {stopped} {kept}. "
                            f"Try {', '.join(tips[:-1])} or {tips[-1]}", step, saved_step)


def train(model: TinyLM, train_tokens: torch.Tensor | ChatRows | Objective,
          val_tokens: torch.Tensor | ChatRows | None = None,
          config: TrainConfig | None = None, *, train_labels: torch.Tensor | None = None,
          val_labels: torch.Tensor | None = None, resume: Checkpoint | None = None,
          out: str | Path | None = None, extra: dict | None = None, until: int | None = None,
          progress: bool = True, log: Callable[[str], None] | None = None, bf16: bool = False,
          tokenizer: BPETokenizer | None = None, on_eval: Callable[[int], str | None] | None = None) -> History:
    """Train model in place for config.steps steps (or config.minutes of wall time) and return the History.

    train_tokens / val_tokens: 1-D token streams, cut into random windows of seq_len; or ChatRows for chat
    fine-tuning, one whole conversation per row, the loss on the assistant's tokens only; or an `Objective`
    (DPO, GRPO), whose step_loss gives each step's loss (val_tokens must then be None: on_eval measures).
    train_labels / val_labels: optional label streams of the same length as the token streams (-100 = not
    supervised; the chat loss mask over packed conversations, as chapter 9 first shows it). resume: a Checkpoint from
    `load_checkpoint` (model weights already loaded into model) to continue exactly where it stopped.
    out: a folder to write a checkpoint to at every evaluation and at the end. until: stop after this
    many steps (the schedule still spans config.steps; checkpoints there too), e.g. to continue later.
    log: called with one line per evaluation (the CLI passes a printer; the library prints nothing).
    progress: show a tqdm bar with the loss and tokens per second. bf16: run the forward pass under bfloat16
    autocast (cuda or cpu; the weights, gradients and optimizer stay fp32). tokenizer: saved with every
    checkpoint (tokenizer.json), so that the folder is complete. on_eval: called after each evaluation with
    the step; a string it returns is logged (the CLI's sample of the model's text); raising `StopTraining`
    ends the run there (early stopping: the schedule does not shrink, the run only ends sooner).

    config.minutes: a wall-clock budget. The run stops after the first step that ends past it (evaluations,
    samples and checkpoints count: it is the learner's clock), then evaluates and saves; config.steps is
    only a ceiling. The warmup stays config.warmup steps; the cosine then runs on the share of the budget
    spent (`time_progress`), reaching min_lr when the minutes are up. History.time records the clock, so a
    resumed run continues it.

    A step whose loss or gradient norm is not finite (NaN or inf: the run diverged) raises TrainingDiverged
    before the optimizer touches the weights, and so does a non-finite validation loss: no checkpoint is
    written after that, so the last one in `out` stays good. A batch with no supervised position (every
    label -100) has loss 0 and teaches nothing; a RuntimeWarning says so.

    Under torchrun (a process group is initialised, world size W > 1) every rank calls train with the same
    arguments: the model (pass the plain TinyLM) is wrapped in DistributedDataParallel, every rank draws the
    same global batch of config.batch_size sequences and trains on its batch_size / W rows, and only rank 0
    shows progress, logs and writes checkpoints. The losses in History are those of the global batch.
    """
    cfg = config or TrainConfig()
    if not isinstance(train_tokens, Objective) and cfg.seq_len > model.cfg.max_seq_len:   # an Objective cuts its own
        raise ValueError(f"seq_len ({cfg.seq_len}) exceeds the model's max_seq_len ({model.cfg.max_seq_len})")
    device = next(model.parameters()).device
    if bf16 and device.type not in ("cpu", "cuda"):
        raise ValueError(f"bf16 autocast runs on cpu or cuda, not {device.type}; drop bf16 (--bf16) or change device")
    rank, world = distributed.rank_and_world()
    distributed.check_batch_size(cfg.batch_size, world)
    if world > 1:   # DDP averages the gradients over the ranks; an expert may get no tokens on a rank
        net = distributed.wrap(model, find_unused_parameters=model.cfg.n_experts > 0)
    else:
        net = model
    optimizer = make_optimizer(model, cfg.lr, cfg.weight_decay)
    sampler = torch.Generator().manual_seed(cfg.seed)   # CPU generator: batches are cut on the CPU
    start, history = 0, History()
    budget = None if cfg.minutes is None else 60.0 * cfg.minutes
    if resume is not None:
        restore_optimizer(optimizer, model, resume.optimizer_state)
        sampler.set_state(resume.sampler_state)
        torch.set_rng_state(resume.torch_rng_state)
        start, history = resume.step, resume.history
    saved_step = None                                   # the step of the last checkpoint written to `out`

    def diverged(what: str, step: int, before_update: bool = True) -> TrainingDiverged:
        kept = (f"the checkpoint in {out} (step {saved_step}) is untouched" if saved_step is not None else
                f"the checkpoint resumed from (step {resume.step}) is untouched" if resume is not None else
                "no checkpoint was written")
        return _diverged(what, step, cfg, bf16, kept, saved_step, before_update)
    stop = check_int("until", cfg.steps if until is None else until, start, cfg.steps,
                     span=f"in [{start}, steps={cfg.steps}]")
    chat = isinstance(train_tokens, ChatRows)
    objective = train_tokens if isinstance(train_tokens, Objective) else None
    if objective is not None and (val_tokens is not None or train_labels is not None or world > 1):
        raise ValueError("an Objective (DPO, GRPO) trains on one process, without val_tokens or train_labels: "
                         "measure held-out data in on_eval")
    if chat and train_labels is not None:
        raise ValueError("ChatRows carry their own labels: pass train_labels only with a token stream")

    def run_eval(step: int) -> bool:
        """Evaluate after `step`; True where on_eval asked the run to stop."""
        if val_tokens is not None:
            loss, ppl = evaluate(model, val_tokens, cfg.batch_size, cfg.seq_len, cfg.eval_batches, val_labels)
            if not math.isfinite(loss):
                raise diverged(f"the validation loss after step {step} is {loss}", step, before_update=False)
            history.val_step.append(step)
            history.val_loss.append(loss)
            history.val_ppl.append(ppl)
            if log and rank == 0:
                train_loss = f"train loss {history.loss[-1]:.3f} | " if history.loss else ""
                clock = f" | {history.time[-1]:6.1f} s" if history.time else ""
                log(f"step {step:>6} | {train_loss}val loss {loss:.3f} | val ppl {ppl:.1f}{clock}")
        stop_now = False
        if on_eval is not None and rank == 0:
            try:
                said = on_eval(step)
            except StopTraining as e:
                said, stop_now = f"stopped after step {step}: {e}", True
            if said and log:
                log(said)
        return distributed.broadcast_object(stop_now)   # every rank stops together

    if start == 0 and not history.val_step:
        if run_eval(0):                                 # the starting point: about ln(vocab_size)
            return history
    model.train()
    bar = tqdm(range(start, stop), initial=start, total=None if budget else cfg.steps,
               disable=not progress or rank != 0, desc="training", dynamic_ncols=True)
    t0, tokens_timed = time.perf_counter(), 0
    clock0 = t0 - (history.time[-1] if history.time else 0.0)    # a resumed run continues its clock
    if budget is not None and history.time and history.time[-1] >= budget:
        raise ValueError(f"the run's budget of {cfg.minutes:g} minutes is already spent "
                         f"({history.time[-1] / 60:.1f} minutes at step {start}); pass a larger --minutes to continue")
    try:
        for step in bar:
            if budget is None:
                lr = lr_at(step, cfg.lr, cfg.min_lr, cfg.warmup, cfg.steps)
            else:   # every rank takes rank 0's clock, so all follow the same schedule and stop together
                elapsed = distributed.broadcast_object(time.perf_counter() - clock0)
                warm_end = history.time[cfg.warmup - 1] if 0 < cfg.warmup <= len(history.time) else 0.0
                lr = lr_at(step, cfg.lr, cfg.min_lr, cfg.warmup, cfg.steps,
                           time_progress(elapsed, budget, warm_end))
            for group in optimizer.param_groups:
                group["lr"] = lr
            if objective is not None:                     # DPO, GRPO: the objective draws its own batch
                with torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else nullcontext():
                    loss, n_tokens = objective.step_loss(model, cfg.batch_size, sampler)
            else:
                if chat:
                    x, y = train_tokens.sample(cfg.batch_size, cfg.seq_len, sampler)           # (B, T) each
                else:
                    x, y = get_batch(train_tokens, cfg.batch_size, cfg.seq_len, sampler, train_labels)  # (B, T)
                if (chat or train_labels is not None) and not bool((y != IGNORE_INDEX).any()):
                    warnings.warn(f"step {step + 1}: every label of the batch is -100, so its loss is 0 and it "
                                  "teaches nothing; use a longer seq_len (or data with more supervised text)",
                                  RuntimeWarning)
                if world > 1:                                  # every rank drew the same batch: keep this rank's rows
                    x, y = distributed.shard(x, rank, world), distributed.shard(y, rank, world)  # (B / W, T) each
                x, y = x.to(device), y.to(device)
                with torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else nullcontext():
                    _, loss = net(x, y)
                if world > 1 and (chat or train_labels is not None):  # the mask leaves ranks unequal counts
                    loss = distributed.rebalance_loss(loss, y, world)
                n_tokens = x.numel() * world               # the global batch (chat rows: padded length)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()                                    # under DDP the gradients arrive averaged over ranks
            clip = cfg.grad_clip if cfg.grad_clip > 0 else math.inf
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            loss_value, norm_value = loss.item(), norm.item()  # the norm is the same on every rank (DDP)
            if world > 1:                                      # the global batch's loss: average over ranks
                loss_value = distributed.all_reduce_sum([loss_value], device)[0] / world
            if not (math.isfinite(loss_value) and math.isfinite(norm_value)):  # every rank sees the same values
                raise diverged(f"the loss is {loss_value} and the gradient norm {norm_value}", step + 1)
            optimizer.step()

            history.step.append(step + 1)
            history.loss.append(loss_value)
            history.lr.append(lr)
            history.grad_norm.append(norm_value)
            history.time.append(distributed.broadcast_object(time.perf_counter() - clock0))   # rank 0's clock
            tokens_timed += n_tokens
            tok_s = tokens_timed / (time.perf_counter() - t0)
            bar.set_postfix(loss=f"{history.loss[-1]:.3f}", lr=f"{lr:.1e}", tok_s=f"{tok_s:,.0f}")
            spent = budget is not None and history.time[-1] >= budget
            if (step + 1) % cfg.eval_every == 0 or step + 1 in (cfg.steps, stop) or spent:
                history.tokens_per_s.append(tok_s)
                stop_now = run_eval(step + 1)
                if out is not None and rank == 0:              # the plain model: no DDP "module." prefix
                    save_checkpoint(out, model, optimizer, step + 1, cfg, sampler, history, extra, tokenizer)
                saved_step = step + 1 if out is not None else None
                t0, tokens_timed = time.perf_counter(), 0   # don't count evaluation and saving as training time
                if stop_now:
                    break
            if spent:
                break
    finally:
        bar.close()
    return history
