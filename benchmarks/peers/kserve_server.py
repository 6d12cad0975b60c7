"""KServe's ModelServer with a custom Model class running onnxruntime (V2 REST protocol, and V2
gRPC on HTTP_PORT + 1).
Usage: kserve_server.py MODELS_DIR HTTP_PORT"""

from __future__ import annotations

from typing import Any

import kserve
from common import args, models, session
from kserve import InferRequest, InferResponse


class OnnxModel(kserve.Model):
    def __init__(self, name: str, path: Any) -> None:
        super().__init__(name)
        self._session = session(path)
        self._outputs = [o.name for o in self._session.get_outputs()]
        self.ready = True

    def predict(self, payload: InferRequest, headers: Any = None) -> InferResponse:  # noqa: ARG002
        feeds = {i.name: i.as_numpy() for i in payload.inputs}
        values = self._session.run(self._outputs, feeds)
        response = InferResponse(response_id="", model_name=self.name, infer_outputs=[])
        for name, value in zip(self._outputs, values, strict=True):
            output = kserve.InferOutput(name=name, shape=list(value.shape), datatype="FP32")
            output.set_data_from_numpy(value, binary_data=False)
            response.outputs.append(output)
        return response


def main() -> None:
    directory, port = args()
    served = [OnnxModel(name, path) for name, (path, _sig) in models(directory).items()]
    kserve.ModelServer(http_port=port, grpc_port=port + 1, enable_grpc=True).start(served)


if __name__ == "__main__":
    main()
