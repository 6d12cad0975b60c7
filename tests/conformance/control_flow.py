"""Control flow built by real Paddle: paddle.static.nn.cond (conditional_block + select_input)
and paddle.static.nn.while_loop (while), with shapes known only at run time. Each function is a
build for paddle_util.build_and_save: it makes the feeds and returns (feeds, fetches).

test_control_flow.py runs them against Paddle's Executor, test_pir.py as PIR programs,
tests/executor/test_portable_onnx.py through convert.export, and batchability.py reports
which of them are batchable."""

from __future__ import annotations

from tests.conformance.paddle_util import (
    install_legacy_compat,
    paddle,
)

install_legacy_compat()


def cond_with_different_shapes() -> tuple[list[object], list[object]]:
    x = paddle.static.data("x", [-1, 4], "float32")
    out = paddle.static.nn.cond(
        paddle.mean(x) > 0.0,
        lambda: paddle.concat([x, x * 0.5], axis=0),  # [2n, 4]
        lambda: paddle.tanh(x[:, :2]) * 2.0,  # [n, 2]
    )
    return [x], [out, paddle.nn.functional.relu(out)]


def nested_cond() -> tuple[list[object], list[object]]:
    x = paddle.static.data("x", [-1, 3], "float32")
    a = paddle.static.data("a", [], "float32")

    def outer_true() -> object:
        return paddle.static.nn.cond(a > 1.0, lambda: x + a, lambda: paddle.exp(x) - a)

    out = paddle.static.nn.cond(a > 0.0, outer_true, lambda: x * a)
    return [x, a], [out]


def cond_on_zero_d_values() -> tuple[list[object], list[object]]:
    x = paddle.static.data("x", [-1, 3], "float32")
    k = paddle.static.data("k", [], "int64")
    total = paddle.static.nn.cond(k > 2, lambda: paddle.sum(x), lambda: paddle.mean(x) * 10.0)
    count = paddle.static.nn.cond(k > 2, lambda: k * 2, lambda: k - 1)
    return [x, k], [total, count]


def while_counting_to_n() -> tuple[list[object], list[object]]:
    x = paddle.static.data("x", [-1, 3], "float32")
    n = paddle.static.data("n", [], "int64")
    i = paddle.full([], 0, "int64")
    i_out, acc = paddle.static.nn.while_loop(
        lambda i, acc: i < n, lambda i, acc: [i + 1, paddle.tanh(acc) * 1.5 + 0.25], [i, x]
    )
    return [x, n], [i_out, acc]


def while_until_values_converge() -> tuple[list[object], list[object]]:
    """The trip count depends on the values of x, not on a counter: halve until small."""
    x = paddle.static.data("x", [-1, 2], "float32")
    steps = paddle.full([1], 0, "int32")
    out, steps_out = paddle.static.nn.while_loop(
        lambda v, s: paddle.max(paddle.abs(v)) > 0.01,
        lambda v, s: [v * 0.5, s + 1],
        [x, steps],
    )
    return [x], [out, steps_out]


def while_with_cond_in_body() -> tuple[list[object], list[object]]:
    x = paddle.static.data("x", [2, 3], "float32")
    n = paddle.static.data("n", [1], "int64")
    i = paddle.full([1], 0, "int64")

    def body(i: object, acc: object) -> list[object]:
        acc = paddle.static.nn.cond(paddle.mean(acc) > 5.0, lambda: acc - 1.0, lambda: acc * 2.0)
        return [paddle.increment(i), acc]

    i_out, acc = paddle.static.nn.while_loop(lambda i, acc: i < n, body, [i, x])
    return [x, n], [i_out, acc]


def nested_while() -> tuple[list[object], list[object]]:
    x = paddle.static.data("x", [-1, 2], "float32")
    n = paddle.static.data("n", [], "int64")
    i = paddle.full([], 0, "int64")

    def outer(i: object, acc: object) -> list[object]:
        j = paddle.full([], 0, "int64")
        _, inner = paddle.static.nn.while_loop(
            lambda j, a: j < i * 2, lambda j, a: [j + 1, a + 1.0], [j, acc]
        )
        return [i + 1, inner * 0.5]

    i_out, acc = paddle.static.nn.while_loop(lambda i, acc: i < n, outer, [i, x])
    return [x, n], [i_out, acc]


def while_growing_a_tensor() -> tuple[list[object], list[object]]:
    """A loop var whose dims change every iteration: known only once the loop has run."""
    x = paddle.static.data("x", [-1, 2], "float32")
    n = paddle.static.data("n", [], "int64")
    i = paddle.full([], 0, "int64")
    _, acc = paddle.static.nn.while_loop(
        lambda i, a: i < n,
        lambda i, a: [i + 1, paddle.concat([a, a[:1] * 2.0], axis=0)],
        [i, x],
    )
    return [x, n], [acc, paddle.sum(acc, axis=0)]


def cond_returning_several_values() -> tuple[list[object], list[object]]:
    x = paddle.static.data("x", [-1, 3], "float32")
    ids = paddle.static.data("ids", [-1], "int64")
    flag = paddle.sum(ids, keepdim=True) > 4  # bool[1]: a one-element, not 0-D, condition
    scaled, picked = paddle.static.nn.cond(
        flag,
        lambda: (x * 2.0, ids + 1),
        lambda: (paddle.sqrt(paddle.abs(x)), ids * 3),
    )
    return [x, ids], [scaled, picked]
