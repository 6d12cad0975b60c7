"""Writes the PIR fixtures of test_pir.py with Paddle 3.3.1 (paddle.jit.save, PIR on): run from data/."""
# mypy: ignore-errors
# (a Paddle script, run by hand to regenerate the fixtures; Paddle ships no type stubs)

import paddle

paddle.seed(0)


class M(paddle.nn.Layer):
    def __init__(self):
        super().__init__()
        self.conv = paddle.nn.Conv2D(3, 4, 3, padding=1)
        self.bn = paddle.nn.BatchNorm2D(4)
        self.fc = paddle.nn.Linear(4 * 8 * 8, 5)

    def forward(self, x):
        y = paddle.nn.functional.relu(self.bn(self.conv(x)))
        y = paddle.reshape(y, [-1, 4 * 8 * 8])
        y = self.fc(y)
        return paddle.nn.functional.softmax(y) + paddle.full([1], 2.0)


m = M()
m.eval()
paddle.jit.save(
    m, "cnn/model", input_spec=[paddle.static.InputSpec([None, 3, 8, 8], "float32", "x")]
)


class C(paddle.nn.Layer):
    def forward(self, x, n):
        if paddle.mean(x) > 0:  # noqa: SIM108 (a Python if is what to_static turns into pd_op.if)
            y = x * 2
        else:
            y = x - 1
        i = paddle.zeros([1], "int64")
        while i < n:
            y = y + 1
            i = i + 1
        return y


c = C()
c.eval()
paddle.jit.save(
    paddle.jit.to_static(c),
    "cf/model",
    input_spec=[
        paddle.static.InputSpec([None, 4], "float32", "x"),
        paddle.static.InputSpec([1], "int64", "n"),
    ],
)
