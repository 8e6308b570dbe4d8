"""The shipped op-definition table against TensorFlow itself (the independent oracle)."""

from __future__ import annotations

import numpy as np
import pytest

import graphwright as gw
from graphwright.formats.graphdef.op_registry import attr_defaults, known_ops, op_def
from graphwright.ir import DType


def test_table_covers_the_ops_of_real_graphs() -> None:
    ops = known_ops()
    assert len(ops) > 1500
    for op in ("Conv2D", "FusedBatchNormV3", "BatchNormWithGlobalNormalization", "QuantizedConv2D",
               "RequantizationRange", "_FusedConv2D", "Print", "ConcatV2", "SpaceToBatchND"):
        assert op in ops, op
    assert attr_defaults("Conv2D")["data_format"].s == b"NHWC"


@pytest.mark.tf
def test_table_matches_the_installed_tensorflow() -> None:
    tf_registry = pytest.importorskip("tensorflow.python.framework.op_def_registry")
    for op in ("Conv2D", "FusedBatchNormV3", "Print", "QuantizeV2", "Requantize"):
        assert op_def(op) is not None
        assert op_def(op).SerializeToString() == tf_registry.get(op).SerializeToString()


def test_loaded_nodes_get_all_outputs_typed(tmp_path) -> None:
    from tensorboard.compat.proto import graph_pb2, types_pb2

    g = graph_pb2.GraphDef()
    x = g.node.add(name="x", op="Placeholder")
    x.attr["dtype"].type = types_pb2.DT_FLOAT
    for name in ("scale", "offset", "mean", "var"):
        c = g.node.add(name=name, op="Const")
        c.attr["dtype"].type = types_pb2.DT_FLOAT
        c.attr["value"].tensor.dtype = types_pb2.DT_FLOAT
        c.attr["value"].tensor.tensor_shape.dim.add(size=1)
        c.attr["value"].tensor.float_val.append(1.0)
    bn = g.node.add(name="bn", op="FusedBatchNormV3", input=["x", "scale", "offset", "mean", "var"])
    bn.attr["T"].type = types_pb2.DT_HALF
    bn.attr["U"].type = types_pb2.DT_FLOAT
    shape = g.node.add(name="shape", op="Shape", input=["bn"])
    shape.attr["T"].type = types_pb2.DT_HALF
    path = tmp_path / "g.pb"
    path.write_bytes(g.SerializeToString())
    model = gw.load(path)
    node = model.graph.find_node("bn")
    assert [v.dtype for v in node.outputs] == [DType.FLOAT16] + [DType.FLOAT32] * 5
    assert model.graph.find_node("shape").output.dtype is DType.INT32  # out_type's default
    written = graph_pb2.GraphDef()
    written.ParseFromString(gw.serialize(model))
    assert written == g  # the extra outputs change nothing on disk
    assert np.array_equal(model.graph.find_node("scale").attrs["value"].value.numpy(), [1.0])
