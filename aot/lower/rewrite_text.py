"""The MLIR text every op rewrite writes around its body (``lower/packed_conv.py``,
``lower/packed_pool.py``): a torch value type, a builtin tensor type, a function's header taking
a convolution's operands as builtin tensors, its return of the result as a torch value, and a
crop of an over-large result. Plain strings: what the rewrites put between them is theirs.
"""

from __future__ import annotations

from aot.lower.depthwise import ConvOperands


def vtensor_type(dims: tuple[int, ...], t: str) -> str:
    return f"!torch.vtensor<[{','.join(map(str, dims))}],{t}>"


def dims_text(dims: tuple[int, ...], t: str) -> str:
    return f"{'x'.join(map(str, dims))}x{t}"


def tensor_type(dims: tuple[int, ...], t: str) -> str:
    return f"tensor<{dims_text(dims, t)}>"


def prologue(name: str, c: ConvOperands) -> str:
    """A rewrite's function header, taking the convolution's operands, and them as builtin tensors
    (``%x``, ``%w``; ``%bt`` the bias, if any) beside a zero (``%zero``)."""
    t = c.dtype
    bias_arg = f", %bt: {vtensor_type((c.w[0],), t)}" if c.bias else ""
    return f"""func.func @{name}(%xt: {vtensor_type(c.x, t)}, %wt: {vtensor_type(c.w, t)}{bias_arg}) -> {vtensor_type(c.y, t)} {{
    %zero = arith.constant 0.0 : {t}
    %x = torch_c.to_builtin_tensor %xt : {vtensor_type(c.x, t)} -> {tensor_type(c.x, t)}
    %w = torch_c.to_builtin_tensor %wt : {vtensor_type(c.w, t)} -> {tensor_type(c.w, t)}"""


def epilogue(result: str, y: tuple[int, ...], t: str) -> str:
    """Return ``result``, the rewritten op's value (``y`` of ``t``) as a builtin tensor."""
    return f"""    %yt = torch_c.from_builtin_tensor {result} : {tensor_type(y, t)} -> {vtensor_type(y, t)}
    return %yt : {vtensor_type(y, t)}
}}"""


def cropped(source: str, source_type: str, c: ConvOperands) -> tuple[str, str]:
    """``source`` cut to the convolution's result where it is larger, and the value holding that."""
    if source_type == tensor_type(c.y, c.dtype):
        return "", source
    return (f"%y = tensor.extract_slice {source}[0, 0, 0, 0] [{', '.join(map(str, c.y))}] [1, 1, 1, 1] : "
            f"{source_type} to {tensor_type(c.y, c.dtype)}"), "%y"
