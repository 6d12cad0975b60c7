"""The onnxruntime runtime MLServer loads (model-settings.json names it)."""

from __future__ import annotations

from pathlib import Path

from common import session
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse


class OnnxRuntime(MLModel):
    async def load(self) -> bool:
        self._session = session(Path(str(self.settings.parameters.uri)))
        self._outputs = [o.name for o in self._session.get_outputs()]
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        feeds = {i.name: NumpyCodec.decode_input(i) for i in payload.inputs}
        values = self._session.run(self._outputs, feeds)
        outputs = [
            NumpyCodec.encode_output(n, v) for n, v in zip(self._outputs, values, strict=True)
        ]
        return InferenceResponse(model_name=self.name, outputs=outputs)
