"""The one-operator ONNX model behind the int8 cosine scan, written in protobuf's wire format by hand.

onnxruntime runs integer matrix products (`MatMulInteger`) with the CPU's byte instructions, reading a
quarter of the memory a float32 product reads; numpy has no such product. Building the model needs only
this encoding of five protobuf messages (ModelProto, GraphProto, NodeProto, ValueInfoProto, TypeProto), so
no `onnx` package is needed.

    matmul_integer(b)  Y (int32, m x n) = (A - a_zero) @ (b - b_zero), A and b uint8, zero points scalars;
                       b is part of the model, so onnxruntime packs it once, when the session is made
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

__all__ = ["matmul_integer"]

_IR_VERSION = 8
_OPSET = 17
_UINT8 = 2
_INT32 = 6
# Field numbers of onnx.proto3 used here.
_MODEL_IR_VERSION, _MODEL_GRAPH, _MODEL_OPSET = 1, 7, 8
_OPSET_VERSION = 2
_GRAPH_NODE, _GRAPH_NAME, _GRAPH_INITIALIZER, _GRAPH_INPUT, _GRAPH_OUTPUT = 1, 2, 5, 11, 12
_INIT_DIMS, _INIT_DATA_TYPE, _INIT_NAME, _INIT_RAW_DATA = 1, 2, 8, 9
_NODE_INPUT, _NODE_OUTPUT, _NODE_OP_TYPE = 1, 2, 4
_VALUE_NAME, _VALUE_TYPE = 1, 2
_TYPE_TENSOR = 1
_TENSOR_ELEM_TYPE, _TENSOR_SHAPE = 1, 2
_SHAPE_DIM = 1
_DIM_PARAM = 2


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _message(field: int, payload: bytes) -> bytes:
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def _text(field: int, text: str) -> bytes:
    return _message(field, text.encode())


def _number(field: int, value: int) -> bytes:
    return _varint(field << 3) + _varint(value)


def _tensor(name: str, elem_type: int, dims: tuple[str, ...]) -> bytes:
    shape = b"".join(_message(_SHAPE_DIM, _text(_DIM_PARAM, dim)) for dim in dims)
    tensor = _number(_TENSOR_ELEM_TYPE, elem_type) + _message(_TENSOR_SHAPE, shape)
    return _text(_VALUE_NAME, name) + _message(_VALUE_TYPE, _message(_TYPE_TENSOR, tensor))


def matmul_integer(b: NDArray[np.uint8]) -> bytes:
    """The serialized model: inputs A (m x k, uint8), a_zero and b_zero (uint8 scalars); `b` (k x n) inside
    it as an initializer; output Y (int32, m x n)."""
    inputs = (("A", ("m", "k")), ("a_zero", ()), ("b_zero", ()))
    node = b"".join(_text(_NODE_INPUT, name) for name in ("A", "B", "a_zero", "b_zero"))
    node += _text(_NODE_OUTPUT, "Y") + _text(_NODE_OP_TYPE, "MatMulInteger")
    weights = b"".join(_number(_INIT_DIMS, size) for size in b.shape) + _number(_INIT_DATA_TYPE, _UINT8)
    weights += _text(_INIT_NAME, "B") + _message(_INIT_RAW_DATA, b.tobytes())
    graph = _message(_GRAPH_NODE, node) + _text(_GRAPH_NAME, "cosines") + _message(_GRAPH_INITIALIZER, weights)
    graph += b"".join(_message(_GRAPH_INPUT, _tensor(name, _UINT8, dims)) for name, dims in inputs)
    graph += _message(_GRAPH_OUTPUT, _tensor("Y", _INT32, ("m", "n")))
    opset = _message(_MODEL_OPSET, _number(_OPSET_VERSION, _OPSET))
    return _number(_MODEL_IR_VERSION, _IR_VERSION) + _message(_MODEL_GRAPH, graph) + opset
