"""Writes the committed ONNX seeds of onnx_fuzzer (fuzz/corpus/onnx_fuzzer): tiny models that reach the
loader's main paths (convolution and pooling, Gemm, shape folding for Reshape, attention-style
MatMul/Softmax, an LSTM). Run with the project's venv python (it has the onnx package):
  ~/.cache/placer/venv-torch-2.11.0/bin/python fuzz/make_onnx_seeds.py
scripts/fuzz.sh adds libonnx-testdata's node models to the working corpus at run time."""
import pathlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OUT = pathlib.Path(__file__).resolve().parent / "corpus" / "onnx_fuzzer"


def weight(name, *shape):
    return numpy_helper.from_array(np.full(shape, 0.01, dtype=np.float32), name)


def save(name, nodes, inputs, outputs, initializers):
    graph = helper.make_graph(nodes, name, inputs, outputs, initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / f"{name}.onnx").write_bytes(model.SerializeToString())


def value(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


save("conv_pool_gemm", [
    helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], strides=[1, 1]),
    helper.make_node("Relu", ["c"], ["r"]),
    helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
    helper.make_node("GlobalAveragePool", ["p"], ["g"]),
    helper.make_node("Flatten", ["g"], ["f"]),
    helper.make_node("Gemm", ["f", "fc", "fb"], ["y"], transB=1),
], [value("x", TensorProto.FLOAT, ["N", 1, 6, 6])], [value("y", TensorProto.FLOAT, ["N", 3])],
     [weight("w", 4, 1, 3, 3), weight("b", 4), weight("fc", 3, 4), weight("fb", 3)])

save("reshape_shape_folding", [
    helper.make_node("Shape", ["x"], ["s"]),
    helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
    helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
    helper.make_node("Concat", ["n1", "minus_one"], ["shape"], axis=0),
    helper.make_node("Reshape", ["x", "shape"], ["flat"]),
    helper.make_node("MatMul", ["flat", "w"], ["y"]),
], [value("x", TensorProto.FLOAT, ["N", 2, 3])], [value("y", TensorProto.FLOAT, ["N", 2])], [
    numpy_helper.from_array(np.array(0, dtype=np.int64), "zero"),
    numpy_helper.from_array(np.array([0], dtype=np.int64), "axes"),
    numpy_helper.from_array(np.array([-1], dtype=np.int64), "minus_one"),
    weight("w", 6, 2)
])

save("attention", [
    helper.make_node("Gather", ["table", "tokens"], ["e"], axis=0),
    helper.make_node("LayerNormalization", ["e", "gamma", "beta"], ["n"], axis=-1),
    helper.make_node("Transpose", ["n"], ["t"], perm=[0, 2, 1]),
    helper.make_node("MatMul", ["n", "t"], ["s"]),
    helper.make_node("Div", ["s", "scale"], ["d"]),
    helper.make_node("Softmax", ["d"], ["a"], axis=-1),
    helper.make_node("MatMul", ["a", "n"], ["y"]),
], [value("tokens", TensorProto.INT64, ["N", 4])], [value("y", TensorProto.FLOAT, ["N", 4, 8])], [
    weight("table", 10, 8), weight("gamma", 8), weight("beta", 8),
    numpy_helper.from_array(np.array(2.0, dtype=np.float32), "scale")
])

save("lstm", [
    helper.make_node("LSTM", ["x", "W", "R", "B"], ["y", "h", "c"], hidden_size=3),
    helper.make_node("Squeeze", ["h", "axes"], ["h2"]),
], [value("x", TensorProto.FLOAT, [2, "N", 4])], [value("h2", TensorProto.FLOAT, ["N", 3])], [
    weight("W", 1, 12, 4), weight("R", 1, 12, 3), weight("B", 1, 24),
    numpy_helper.from_array(np.array([0], dtype=np.int64), "axes")
])
