"""Import a loaded model to MLIR (torch dialect) in process, weights in one IRPA archive."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from aot.errors import ImporterError
from aot.frontend.load import ModelSource

if TYPE_CHECKING:
    import onnx

    from aot.frontend.torch.export import TorchSource

PARAMS_SCOPE = "model"
# Initializers with fewer elements stay inline (copied into each region that reads them): a
# parameter lookup costs more than it saves for a bias vector or a shape constant.
INLINE_MAX_ELEMENTS = 64


@dataclass(frozen=True, slots=True)
class ImportedModule:
    mlir: str              # module text with locations: loc("<onnx node name>") on each op
    params_path: Path      # the shared weights archive
    func_name: str


def import_model(source: ModelSource, params_path: Path) -> ImportedModule:
    """Run IREE's ONNX importer; write the parameter archive to ``params_path`` atomically."""
    return import_onnx(source.model, source.name, source.path.parent, params_path)


def import_onnx(model: "onnx.ModelProto", name: str, data_dir: Path, params_path: Path) -> ImportedModule:
    """``import_model`` of a bare ONNX model (``data_dir``: where its external data lies). Symbolic
    dimensions stay dynamic (``?``): the dynamic fallback module is imported this way."""
    from iree.compiler import ir
    from iree.compiler.extras import onnx_importer
    from iree.compiler.tools.import_onnx.importer_externalization_overrides import IREENodeImporter, ParamData

    tmp = params_path.with_name(params_path.name + f".tmp{os.getpid()}")
    try:
        context = ir.Context()
        info = onnx_importer.ModelInfo(model)
        module = info.create_module(context=context).operation
        param_data = ParamData(param_bit_threshold=None, num_elements_threshold=INLINE_MAX_ELEMENTS,
                               params_scope=PARAMS_SCOPE, data_dir=str(data_dir),
                               param_path=str(tmp), input_index_threshold=None)
        imp = IREENodeImporter.define_function(info.main_graph, module, param_data)
        imp.import_all()
        module.verify()
        imp.save_params()
        text = module.get_asm(enable_debug_info=True)
    except Exception as e:
        tmp.unlink(missing_ok=True)
        raise ImporterError(f"IREE's ONNX importer failed on {name!r}: {type(e).__name__}: {e}",
                            hint="the model may use an op or attribute the importer does not handle; "
                                 "try iree-import-onnx on it to see the full error") from e
    os.replace(tmp, params_path)
    return ImportedModule(text, params_path, model.graph.name)


def import_source(source: "ModelSource | TorchSource", params_path: Path) -> ImportedModule:
    """The imported module of either front end. A torch source is MLIR already (turbine exported
    it before partitioning); importing it only writes its weights to the shared archive."""
    if isinstance(source, ModelSource):
        return import_model(source, params_path)
    from aot.frontend.torch.export import FUNC_NAME, save_params

    tmp = params_path.with_name(params_path.name + f".tmp{os.getpid()}.irpa")
    try:
        save_params(source, tmp)
    except Exception as e:
        tmp.unlink(missing_ok=True)
        raise ImporterError(f"could not write the weights of {source.name!r}: {type(e).__name__}: {e}") from e
    os.replace(tmp, params_path)
    return ImportedModule(source.mlir, params_path, FUNC_NAME)
