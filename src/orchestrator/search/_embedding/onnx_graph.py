"""The one-operator ONNX model behind the int8 cosine scan, written in protobuf's wire format by hand.

onnxruntime runs integer matrix products (`MatMulInteger`) with the CPU's byte instructions, reading a
quarter of the memory a float32 product reads; numpy has no such product. Building the model needs only
this encoding of five protobuf messages (ModelProto, GraphProto, NodeProto, ValueInfoProto, TypeProto), so
no `onnx` package is needed.

    matmul_integer()   Y (int32, m x n) = (A - a_zero) @ (B - b_zero), A and B uint8, zero points scalars
"""

from __future__ import annotations

__all__ = ["matmul_integer"]

_IR_VERSION = 8
_OPSET = 17
_UINT8 = 2
_INT32 = 6
# Field numbers of onnx.proto3 used here.
_MODEL_IR_VERSION, _MODEL_GRAPH, _MODEL_OPSET = 1, 7, 8
_OPSET_VERSION = 2
_GRAPH_NODE, _GRAPH_NAME, _GRAPH_INPUT, _GRAPH_OUTPUT = 1, 2, 11, 12
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


def matmul_integer() -> bytes:
    """The serialized model: inputs A (m x k), B (k x n), a_zero, b_zero (uint8 scalars); output Y int32."""
    inputs = (("A", ("m", "k")), ("B", ("k", "n")), ("a_zero", ()), ("b_zero", ()))
    node = b"".join(_text(_NODE_INPUT, name) for name, _dims in inputs)
    node += _text(_NODE_OUTPUT, "Y") + _text(_NODE_OP_TYPE, "MatMulInteger")
    graph = _message(_GRAPH_NODE, node) + _text(_GRAPH_NAME, "cosines")
    graph += b"".join(_message(_GRAPH_INPUT, _tensor(name, _UINT8, dims)) for name, dims in inputs)
    graph += _message(_GRAPH_OUTPUT, _tensor("Y", _INT32, ("m", "n")))
    opset = _message(_MODEL_OPSET, _number(_OPSET_VERSION, _OPSET))
    return _number(_MODEL_IR_VERSION, _IR_VERSION) + _message(_MODEL_GRAPH, graph) + opset
