"""The corpus: architectures built from the Paddle ecosystem packages' own code.

Each Entry names the package module and factory that builds its Layer (random weights, fixed
seed, small configurations and inputs), its feeds, and its category. `build()` runs only inside
export.py's subprocess, where the packages are importable (ecosystem.enable()).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Feed:
    """One input: its InputSpec (-1 = batch or a dynamic dim) and, for ints, the value range."""

    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    high: int = 0  # ints drawn from [low, high)
    low: int = 0
    # floats drawn uniformly from this range (sizes, scale factors) instead of N(0, 1)
    uniform: tuple[float, float] | None = None
    # The dims it runs with, where the InputSpec's -1 are no batch first ("B": the batch,
    # "T": the entry's `dynamic`): a state input [-1, -1, -1] that is really [3, B, 64].
    runs_as: tuple[int | str, ...] = ()


@dataclass(frozen=True)
class Entry:
    name: str
    package: str  # pip name of the package whose code builds it
    category: str
    factory: Callable[[], Any]
    inputs: tuple[Feed, ...]
    seed: int = 0
    # The size every -1 other than the batch dim takes when the model runs.
    dynamic: int = 16
    notes: str = ""

    def build(self) -> Any:
        return self.factory()


def _from(
    module: str, factory: str, run_init: tuple[str, ...] = (), **kwargs: Any
) -> Callable[[], Any]:
    """A factory: `module.factory(**kwargs)` imported with ecosystem.load."""

    def build() -> Any:
        from tests.corpus import ecosystem

        ecosystem.enable(run_init)
        if module.startswith("ppcls."):
            ecosystem.load("ppcls.utils.logger").init_logger()
        return getattr(ecosystem.load(module), factory)(**kwargs)

    build.__qualname__ = f"{module}.{factory}"
    return build


def _composite(make: Callable[..., Any], run_init: tuple[str, ...] = ()) -> Callable[[], Any]:
    """A factory: `make(load)` where load(module) imports an ecosystem module (composite models:
    a backbone passed to a head, a config object)."""

    def build() -> Any:
        from tests.corpus import ecosystem

        ecosystem.enable(run_init)
        return make(ecosystem.load)

    build.__qualname__ = getattr(make, "__qualname__", "composite")
    return build


def image(size: int = 64, channels: int = 3, name: str = "x") -> tuple[Feed, ...]:
    return (Feed(name, (-1, channels, size, size)),)


ENTRIES: dict[str, Entry] = {}


def add(entry: Entry) -> None:
    assert entry.name not in ENTRIES, entry.name
    ENTRIES[entry.name] = entry


# -- paddleclas: CNNs and vision transformers -------------------------------------------------
_CLAS = "paddleclas"
_LEGENDARY = "ppcls.arch.backbone.legendary_models"
_ZOO = "ppcls.arch.backbone.model_zoo"
for _name, _module, _factory, _size, _kwargs in [
    ("pplcnet_x0_25", f"{_LEGENDARY}.pp_lcnet", "PPLCNet_x0_25", 64, {}),
    ("pplcnetv2_small", f"{_LEGENDARY}.pp_lcnet_v2", "PPLCNetV2_small", 64, {}),
    ("resnet18_vd", f"{_LEGENDARY}.resnet", "ResNet18_vd", 64, {}),
    ("resnet50", f"{_LEGENDARY}.resnet", "ResNet50", 64, {}),
    ("mobilenet_v3_small", f"{_LEGENDARY}.mobilenet_v3", "MobileNetV3_small_x0_35", 64, {}),
    ("mobilenet_v1_x0_25", f"{_LEGENDARY}.mobilenet_v1", "MobileNetV1_x0_25", 64, {}),
    ("esnet_x0_25", f"{_LEGENDARY}.esnet", "ESNet_x0_25", 64, {}),
    ("pphgnet_tiny", f"{_LEGENDARY}.pp_hgnet", "PPHGNet_tiny", 64, {}),
    ("pphgnetv2_b0", f"{_LEGENDARY}.pp_hgnet_v2", "PPHGNetV2_B0", 64, {}),
    ("hrnet_w18_c", f"{_LEGENDARY}.hrnet", "HRNet_W18_C", 64, {}),
    ("shufflenet_v2_x0_25", f"{_ZOO}.shufflenet_v2", "ShuffleNetV2_x0_25", 64, {}),
    ("mobilenet_v2_x0_25", f"{_ZOO}.mobilenet_v2", "MobileNetV2_x0_25", 64, {}),
    ("inception_v3", f"{_LEGENDARY}.inception_v3", "InceptionV3", 96, {}),
    (
        "swin_tiny",
        f"{_LEGENDARY}.swin_transformer",
        "SwinTransformer_tiny_patch4_window7_224",
        224,
        {},
    ),
    ("repvgg_a0", f"{_ZOO}.repvgg", "RepVGG_A0", 64, {}),
    ("rexnet_1_0", f"{_ZOO}.rexnet", "ReXNet_1_0", 64, {}),
    ("ghostnet_x0_5", f"{_ZOO}.ghostnet", "GhostNet_x0_5", 64, {}),
    ("mixnet_s", f"{_ZOO}.mixnet", "MixNet_S", 224, {}),  # a fixed 7x7 final pool
    ("regnetx_200mf", f"{_ZOO}.regnet", "RegNetX_200MF", 64, {}),
    ("res2net50_26w_4s", f"{_ZOO}.res2net", "Res2Net50_26w_4s", 64, {}),
    ("densenet121", f"{_ZOO}.densenet", "DenseNet121", 64, {}),
    ("dla34", f"{_ZOO}.dla", "DLA34", 64, {}),
    ("efficientnet_b0", f"{_ZOO}.efficientnet", "EfficientNetB0", 64, {}),
    ("convnext_tiny", f"{_ZOO}.convnext", "ConvNeXt_tiny", 64, {}),
    ("mobilevit_xxs", f"{_ZOO}.mobilevit", "MobileViT_XXS", 256, {}),
    ("vit_small", f"{_ZOO}.vision_transformer", "ViT_small_patch16_224", 224, {}),
    ("deit_tiny", f"{_ZOO}.distilled_vision_transformer", "DeiT_tiny_patch16_224", 224, {}),
    ("levit_128s", f"{_ZOO}.levit", "LeViT_128S", 224, {}),
    ("pvt_v2_b0", f"{_ZOO}.pvt_v2", "PVT_V2_B0", 64, {}),
    ("tnt_small", f"{_ZOO}.tnt", "TNT_small", 224, {}),
    ("cspdarknet53", f"{_ZOO}.cspnet", "CSPDarkNet53", 64, {}),
]:
    add(Entry(_name, _CLAS, "classification", _from(_module, _factory, **_kwargs), image(_size)))


# -- paddleseg: segmentation --------------------------------------------------------------------
_SEG = "paddleseg"
_SEG_INIT = ("paddleseg.models.layers", "paddleseg.utils", "paddleseg.cvlibs")
_SEG_MODELS: dict[str, tuple[Callable[[Any], Any], int]] = {
    "pp_liteseg_stdc1": (
        lambda load: load("paddleseg.models.pp_liteseg").PPLiteSeg(
            4, load("paddleseg.models.backbones.stdcnet").STDC1()
        ),
        64,
    ),
    "pp_mobileseg_tiny": (
        lambda load: load("paddleseg.models.pp_mobileseg").PPMobileSeg(
            4,
            load("paddleseg.models.backbones.strideformer").MobileSeg_Tiny(
                inj_type="AAMSx8", out_feat_chs=[32, 64, 128]
            ),
        ),
        64,
    ),
    "unet": (lambda load: load("paddleseg.models.unet").UNet(4), 64),
    "bisenetv2": (lambda load: load("paddleseg.models.bisenet").BiSeNetV2(4), 64),
    "fast_scnn": (lambda load: load("paddleseg.models.fast_scnn").FastSCNN(4), 64),
    "segformer_b0": (
        lambda load: load("paddleseg.models.segformer").SegFormer(
            4,
            load("paddleseg.models.backbones.mix_transformer").MixVisionTransformer_B0(),
            embedding_dim=64,
        ),
        64,
    ),
    "pphumanseg_lite": (
        lambda load: load("paddleseg.models.pphumanseg_lite").PPHumanSegLite(2),
        64,
    ),
    "deeplabv3p_resnet18": (
        lambda load: load("paddleseg.models.deeplab").DeepLabV3P(
            4, load("paddleseg.models.backbones.resnet_vd").ResNet18_vd(), backbone_indices=(0, 3)
        ),
        64,
    ),
    "lraspp_mobilenetv3": (
        lambda load: load("paddleseg.models.lraspp").LRASPP(
            4, load("paddleseg.models.backbones.mobilenetv3").MobileNetV3_large_x0_35()
        ),
        64,
    ),
    "topformer_tiny": (
        lambda load: load("paddleseg.models.topformer").TopFormer(
            4, load("paddleseg.models.backbones.top_transformer").TopTransformer_Tiny()
        ),
        64,
    ),
    "fcn_hrnet_w18_small": (
        lambda load: load("paddleseg.models.fcn").FCN(
            4, load("paddleseg.models.backbones.hrnet").HRNet_W18_Small_V1()
        ),
        64,
    ),
}
for _name, (_make, _size) in _SEG_MODELS.items():
    add(Entry(_name, _SEG, "segmentation", _composite(_make, _SEG_INIT), image(_size)))


# -- PaddleOCR (ppocr/modeling of unstructured-paddleocr): detection, recognition, angle -------
_OCR = "unstructured-paddleocr"


def _ocr(config: Mapping[str, Any]) -> Callable[[Any], Any]:
    def make(load: Any) -> Any:
        return load("ppocr.modeling.architectures.base_model").BaseModel(dict(config))

    return make


_OCR_MODELS: dict[str, tuple[str, Mapping[str, Any], tuple[int, int]]] = {
    "ocr_det_db_mobilenetv3": ("ocr detection", {
        "model_type": "det", "algorithm": "DB", "Transform": None,
        "Backbone": {"name": "MobileNetV3", "scale": 0.5, "model_name": "large"},
        "Neck": {"name": "DBFPN", "out_channels": 96}, "Head": {"name": "DBHead", "k": 50},
    }, (64, 64)),
    "ocr_det_ppocrv4_lcnetv3": ("ocr detection", {
        "model_type": "det", "algorithm": "DB", "Transform": None,
        "Backbone": {"name": "PPLCNetV3", "scale": 0.75, "det": True},
        "Neck": {"name": "RSEFPN", "out_channels": 96, "shortcut": True},
        "Head": {"name": "DBHead", "k": 50},
    }, (64, 64)),
    "ocr_det_db_resnet18_vd": ("ocr detection", {
        "model_type": "det", "algorithm": "DB", "Transform": None,
        "Backbone": {"name": "ResNet_vd", "layers": 18},
        "Neck": {"name": "DBFPN", "out_channels": 64}, "Head": {"name": "DBHead", "k": 50},
    }, (64, 64)),
    "ocr_rec_crnn_mobilenetv3": ("ocr recognition (CTC)", {
        "model_type": "rec", "algorithm": "CRNN", "Transform": None,
        "Backbone": {"name": "MobileNetV3", "scale": 0.5, "model_name": "small", "small_stride": [1, 2, 2, 2]},
        "Neck": {"name": "SequenceEncoder", "encoder_type": "rnn", "hidden_size": 32},
        "Head": {"name": "CTCHead", "out_channels": 40},
    }, (32, 100)),
    "ocr_rec_svtr_lcnet": ("ocr recognition (CTC)", {
        "model_type": "rec", "algorithm": "SVTR_LCNet", "Transform": None,
        "Backbone": {"name": "PPLCNetV3", "scale": 0.5},
        "Neck": {"name": "SequenceEncoder", "encoder_type": "svtr", "dims": 64, "depth": 2, "hidden_dims": 32, "use_guide": True},
        "Head": {"name": "CTCHead", "out_channels": 40},
    }, (48, 160)),
    "ocr_rec_resnet34_ctc": ("ocr recognition (CTC)", {
        "model_type": "rec", "algorithm": "CRNN", "Transform": None,
        "Backbone": {"name": "ResNet", "layers": 34},
        "Neck": {"name": "SequenceEncoder", "encoder_type": "reshape"},
        "Head": {"name": "CTCHead", "out_channels": 40},
    }, (32, 100)),
    "ocr_cls_mobilenetv3": ("ocr angle classification", {
        "model_type": "cls", "algorithm": "CLS", "Transform": None,
        "Backbone": {"name": "MobileNetV3", "scale": 0.35, "model_name": "small"},
        "Neck": None, "Head": {"name": "ClsHead", "class_dim": 2},
    }, (48, 192)),
}  # fmt: skip
_OCR_INIT = ("ppocr.modeling",)
for _name, (_category, _config, (_h, _w)) in _OCR_MODELS.items():
    add(
        Entry(
            _name,
            _OCR,
            _category,
            _composite(_ocr(_config), _OCR_INIT),
            (Feed("x", (-1, 3, _h, _w)),),
        )
    )


# -- paddlenlp: encoders and a GPT-style decoder (configs, random weights) --------------------
_NLP = "paddlenlp"
_SMALL = {
    "vocab_size": 100, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
    "intermediate_size": 128, "max_position_embeddings": 128, "hidden_dropout_prob": 0.0,
    "attention_probs_dropout_prob": 0.0,
}  # fmt: skip


def _nlp(family: str, model: str, config: str, **overrides: Any) -> Callable[[Any], Any]:
    def make(load: Any) -> Any:
        module = load(f"paddlenlp.transformers.{family}.modeling")
        configuration = load(f"paddlenlp.transformers.{family}.configuration")
        return getattr(module, model)(getattr(configuration, config)(**{**_SMALL, **overrides}))

    return make


_NLP_MODELS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "bert": ("nlp encoder", _nlp("bert", "BertModel", "BertConfig")),
    "ernie": ("nlp encoder", _nlp("ernie", "ErnieModel", "ErnieConfig")),
    "roberta": ("nlp encoder", _nlp("roberta", "RobertaModel", "RobertaConfig")),
    "electra": ("nlp encoder", _nlp("electra", "ElectraModel", "ElectraConfig", embedding_size=64)),
    "mobilebert": ("nlp encoder", _nlp("mobilebert", "MobileBertModel", "MobileBertConfig", embedding_size=32, intra_bottleneck_size=32)),
    "tinybert": ("nlp encoder", _nlp("tinybert", "TinyBertModel", "TinyBertConfig")),
    "ernie_seq_cls": ("nlp encoder", _nlp("ernie", "ErnieForSequenceClassification", "ErnieConfig")),
    "gpt": ("nlp decoder (GPT)", _nlp("gpt", "GPTModel", "GPTConfig")),
}  # fmt: skip
for _name, (_category, _make) in _NLP_MODELS.items():
    add(
        Entry(
            _name, _NLP, _category, _composite(_make), (Feed("input_ids", (-1, -1), "int64", 100),)
        )
    )


# -- paddledet: detection, with and without post-processing (NMS) -----------------------------
# Built from ppdet.modeling's own backbone, neck and head classes (not the config machinery),
# small widths and 64x64 images: at most a few hundred candidates per class (graphgate's NMS
# lowering takes nms_top_k <= 1024).
_DET = "paddledet"
_NUM_CLASSES = 4


def _nms(load: Any) -> Any:
    return load("ppdet.modeling.layers").MultiClassNMS(
        score_threshold=0.01, nms_top_k=1000, keep_top_k=100, nms_threshold=0.6
    )


def _detector(backbone: Any, neck: Any, head: Any, post: Callable[..., Any]) -> Any:
    """A Layer running backbone -> neck -> head -> post(head outputs, *extra feeds)."""
    import paddle

    class Detector(paddle.nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.backbone, self.neck, self.head = backbone, neck, head

        def forward(self, image: Any, first: Any = None, second: Any = None) -> Any:
            # named, not *args: to_static counts a function's parameters against its specs
            extra = [feed for feed in (first, second) if feed is not None]
            features = self.neck(self.backbone({"image": image}))
            return post(self.head(features), *extra)

    return Detector()


def _ppyoloe(with_nms: bool) -> Callable[[Any], Any]:
    def make(load: Any) -> Any:
        backbone = load("ppdet.modeling.backbones.cspresnet").CSPResNet(
            layers=[3, 6, 6, 3], channels=[64, 128, 256, 512, 1024], return_idx=[1, 2, 3],
            use_large_stem=True, width_mult=0.25, depth_mult=0.33, use_alpha=True,
        )  # fmt: skip
        neck = load("ppdet.modeling.necks.custom_pan").CustomCSPPAN(
            in_channels=[s.channels for s in backbone.out_shape], out_channels=[768, 384, 192],
            stage_num=1, block_num=3, act="swish", spp=True, width_mult=0.25, depth_mult=0.33,
            use_alpha=True,
        )  # fmt: skip
        head = load("ppdet.modeling.heads.ppyoloe_head").PPYOLOEHead(
            in_channels=[s.channels for s in neck.out_shape], num_classes=_NUM_CLASSES,
            fpn_strides=(32, 16, 8), static_assigner=None, assigner=None, nms=_nms(load),
            exclude_post_process=not with_nms,
        )  # fmt: skip

        def post(outs: Any, *scale: Any) -> Any:
            return (
                head.post_process(outs, *scale)[:2]
                if with_nms
                else head.post_process(outs, None)[0]
            )

        return _detector(backbone, neck, head, post)

    return make


def _picodet(load: Any) -> Any:
    backbone = load("ppdet.modeling.backbones.lcnet").LCNet(scale=0.35, feature_maps=[3, 4, 5])
    neck = load("ppdet.modeling.necks.lc_pan").LCPAN(
        in_channels=[s.channels for s in backbone.out_shape], out_channels=64,
        use_depthwise=True, num_features=4,
    )  # fmt: skip
    pico = load("ppdet.modeling.heads.pico_head")
    head = pico.PicoHeadV2(
        conv_feat=pico.PicoFeat(feat_in=64, feat_out=64, num_fpn_stride=4, num_convs=2,
                                norm_type="bn", share_cls_reg=True, use_se=True),
        num_classes=_NUM_CLASSES, fpn_stride=[8, 16, 32, 64], feat_in_chan=64,
        static_assigner=None, assigner=None,
        loss_class=load("ppdet.modeling.losses.varifocal_loss").VarifocalLoss(),
        loss_dfl=load("ppdet.modeling.losses.gfocal_loss").DistributionFocalLoss(),
        loss_bbox=load("ppdet.modeling.losses.iou_loss").GIoULoss(),
        nms=_nms(load), cell_offset=0.5,
    )  # fmt: skip

    # Its score convs start at N(0, 0.01): every anchor would score the same to 6 digits and
    # NMS would pick among ties (an arbitrary order, in Paddle too). Spread them.
    import paddle

    for parameter in [*head.head_cls_list.parameters(), *head.cls_align.parameters()]:
        parameter.set_value(paddle.normal(0.0, 0.3, parameter.shape))

    def post(outs: Any, scale: Any) -> Any:
        return head.post_process(outs, scale)

    return _detector(backbone, neck, head, post)


def _yolov3(load: Any) -> Any:
    backbone = load("ppdet.modeling.backbones.mobilenet_v1").MobileNet(
        scale=0.25, feature_maps=[4, 6, 13]
    )
    neck = load("ppdet.modeling.necks.yolo_fpn").YOLOv3FPN(
        in_channels=[s.channels for s in backbone.out_shape]
    )
    head = load("ppdet.modeling.heads.yolo_head").YOLOv3Head(
        in_channels=[s.channels for s in neck.out_shape], num_classes=_NUM_CLASSES, loss=None
    )
    layers = load("ppdet.modeling.layers")
    decode = layers.YOLOBox(num_classes=_NUM_CLASSES, conf_thresh=0.005, scale_x_y=1.05)
    nms = _nms(load)

    def post(outs: Any, im_shape: Any, scale_factor: Any) -> Any:
        boxes, scores = decode(outs, head.mask_anchors, im_shape, scale_factor)
        return nms(boxes, scores, -1)[:2]

    return _detector(backbone, neck, head, post)


_SCALE = Feed("scale_factor", (-1, 2), uniform=(0.8, 1.25))
_DET_MODELS: dict[str, tuple[str, Callable[[Any], Any], tuple[Feed, ...]]] = {
    "ppyoloe_plus_s": ("detection", _ppyoloe(False), image(64, name="image")),
    "ppyoloe_plus_s_nms": ("detection (NMS)", _ppyoloe(True), (*image(64, name="image"), _SCALE)),
    "picodet_lcnet_nms": ("detection (NMS)", _picodet, (*image(64, name="image"), _SCALE)),
    "yolov3_mobilenet_v1_nms": ("detection (NMS)", _yolov3, (
        *image(64, name="image"), Feed("im_shape", (-1, 2), uniform=(48.0, 64.0)), _SCALE,
    )),
}  # fmt: skip
for _name, (_category, _make, _feeds) in _DET_MODELS.items():
    add(Entry(_name, _DET, _category, _composite(_make), _feeds))


# -- paddlespeech: speech encoders (small configs) -------------------------------------------
_SPEECH = "paddlespeech"
_FEATURES = 80
_FRAMES = 64  # the time dim every model runs with


def _conformer(load: Any) -> Any:
    import paddle

    encoder = load("paddlespeech.s2t.modules.encoder").ConformerEncoder(
        input_size=_FEATURES, output_size=64, attention_heads=2, linear_units=128, num_blocks=2,
        dropout_rate=0.0, positional_dropout_rate=0.0, cnn_module_kernel=7,
    )  # fmt: skip

    class Encoder(paddle.nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = encoder

        def forward(self, xs: Any, xs_lens: Any) -> Any:
            out, masks = self.encoder(xs, xs_lens)
            return out, masks.astype("int32")

    return Encoder()


def _deepspeech2(load: Any) -> Any:
    return load("paddlespeech.s2t.models.ds2.deepspeech2").DeepSpeech2InferModel(
        feat_size=_FEATURES, dict_size=40, num_conv_layers=2, num_rnn_layers=2, rnn_size=64,
        rnn_direction="bidirect", num_fc_layers=1, fc_layers_size_list=[64],
    )  # fmt: skip


def _speech_feeds(shortest: int) -> tuple[Feed, ...]:
    return (
        Feed("audio", (-1, -1, _FEATURES)),
        Feed("audio_len", (-1,), "int64", high=_FRAMES + 1, low=shortest),
    )


# The Conformer's attention masks are as wide as its longest length: lengths are all full
# (a shorter batch maximum than the frames fed makes Paddle's own masked_fill fail).
for _name, _make, _shortest in (
    ("conformer_encoder", _conformer, _FRAMES),
    ("deepspeech2", _deepspeech2, _FRAMES // 2),
):
    add(
        Entry(
            _name,
            _SPEECH,
            "speech encoder",
            _composite(_make),
            _speech_feeds(_shortest),
            dynamic=_FRAMES,
        )
    )


# -- programs with inputs that are no batch: states, caches, image sizes (issue #23) ----------
# Each declares every such dim -1, as its toolkit's export does; `runs_as` gives the sizes it
# really takes. graphgate must accept them (no size they never take refused) and answer like
# Paddle.
_LAYERS = 3
_HIDDEN = 64


def _deepspeech2_online(load: Any) -> Any:
    """PaddleSpeech's streaming DS2 (`DeepSpeech2InferModel` with forward RNNs): one chunk of
    audio and the RNNs' states in, the chunk's probabilities and the next states out."""
    return load("paddlespeech.s2t.models.ds2.deepspeech2").DeepSpeech2InferModel(
        feat_size=_FEATURES, dict_size=40, num_conv_layers=2, num_rnn_layers=_LAYERS,
        rnn_size=_HIDDEN, rnn_direction="forward", num_fc_layers=1, fc_layers_size_list=[64],
    )  # fmt: skip


_STATE = (-1, -1, -1)  # as DeepSpeech2InferModel.export declares it
add(
    Entry(
        "deepspeech2_online",
        _SPEECH,
        "speech streaming (state inputs)",
        _composite(_deepspeech2_online),
        (
            Feed("audio_chunk", (-1, -1, _FEATURES)),
            Feed("audio_chunk_lens", (-1,), "int64", high=_FRAMES + 1, low=_FRAMES // 2),
            Feed("chunk_state_h_box", _STATE, runs_as=(_LAYERS, "B", _HIDDEN)),
            Feed("chunk_state_c_box", _STATE, runs_as=(_LAYERS, "B", _HIDDEN)),
        ),
        dynamic=_FRAMES,
    )
)


def _rnn_with_initial_states() -> Any:
    """paddle.nn.LSTM (2 layers) and GRU (bidirectional) fed their initial states, as a
    streaming or stateful serving export takes them: h0/c0 [layers * directions, B, hidden]."""
    import paddle

    class StatefulRnn(paddle.nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = paddle.nn.LSTM(16, 32, num_layers=2)
            self.gru = paddle.nn.GRU(32, 24, direction="bidirect")

        def forward(self, x: Any, h0: Any, c0: Any, g0: Any) -> Any:
            y, (h1, c1) = self.lstm(x, (h0, c0))
            z, g1 = self.gru(y, g0)
            return z, h1, c1, g1

    return StatefulRnn()


add(
    Entry(
        "rnn_initial_states",
        "paddle",
        "rnn (initial-state inputs)",
        _rnn_with_initial_states,
        (
            Feed("x", (-1, -1, 16)),
            Feed("h0", (-1, -1, 32), runs_as=(2, "B", 32)),
            Feed("c0", (-1, -1, 32), runs_as=(2, "B", 32)),
            Feed("g0", (-1, -1, -1), runs_as=(2, "B", 24)),
        ),
    )
)

_DECODER_LAYERS, _HEADS, _HEAD_DIM = 2, 4, 16


def _kv_cache_decoder() -> Any:
    """A GPT-style decoder step with paddle.nn.MultiHeadAttention.Cache: the new tokens attend
    to the cached keys/values of every layer (one input each, [layers, B, heads, L, dim], L
    dynamic) and their own, causally; the logits and the grown caches come out."""
    import paddle

    width = _HEADS * _HEAD_DIM

    class Block(paddle.nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.attention = paddle.nn.MultiHeadAttention(width, _HEADS)
            self.norm1, self.norm2 = paddle.nn.LayerNorm(width), paddle.nn.LayerNorm(width)
            self.up, self.down = (
                paddle.nn.Linear(width, 2 * width),
                paddle.nn.Linear(2 * width, width),
            )

        def forward(self, x: Any, mask: Any, k: Any, v: Any) -> Any:
            cache = paddle.nn.MultiHeadAttention.Cache(k, v)
            attended, cache = self.attention(self.norm1(x), attn_mask=mask, cache=cache)
            x = x + attended
            x = x + self.down(paddle.nn.functional.gelu(self.up(self.norm2(x))))
            return x, cache.k, cache.v

    class CachedDecoder(paddle.nn.Layer):
        def __init__(self) -> None:
            super().__init__()
            self.embed = paddle.nn.Embedding(100, width)
            self.blocks = paddle.nn.LayerList([Block() for _ in range(_DECODER_LAYERS)])
            self.head = paddle.nn.Linear(width, 100)

        def forward(self, input_ids: Any, cache_k: Any, cache_v: Any) -> Any:
            steps, cached = paddle.shape(input_ids)[1], paddle.shape(cache_k)[3]
            # Token i (at position cached + i) sees positions 0 .. cached + i.
            query = paddle.arange(steps, dtype="int64").unsqueeze(1) + cached.astype("int64")
            keys = paddle.arange(cached + steps, dtype="int64").unsqueeze(0)
            mask = paddle.where(keys <= query, 0.0, -1e4).astype("float32")
            x = self.embed(input_ids)
            ks = paddle.split(cache_k, _DECODER_LAYERS, axis=0)
            vs = paddle.split(cache_v, _DECODER_LAYERS, axis=0)
            grown_k, grown_v = [], []
            for layer in range(_DECODER_LAYERS):
                k, v = ks[layer].squeeze(0), vs[layer].squeeze(0)
                x, k, v = self.blocks[layer](x, mask, k, v)
                grown_k.append(k.unsqueeze(0))
                grown_v.append(v.unsqueeze(0))
            return self.head(x), paddle.concat(grown_k, 0), paddle.concat(grown_v, 0)

    return CachedDecoder()


_CACHE = (_DECODER_LAYERS, "B", _HEADS, "T", _HEAD_DIM)
add(
    Entry(
        "kv_cache_decoder",
        "paddle",
        "nlp decoder (KV cache)",
        _kv_cache_decoder,
        (
            Feed("input_ids", (-1, -1), "int64", 100),
            Feed("cache_k", (-1, -1, _HEADS, -1, _HEAD_DIM), runs_as=_CACHE),
            Feed("cache_v", (-1, -1, _HEADS, -1, _HEAD_DIM), runs_as=_CACHE),
        ),
        dynamic=8,
    )
)

# PP-YOLOE+ exported for any image size (its anchors made from the feature maps' sizes at run
# time): the number of boxes NMS gets is unknown to the program, bounded by nms_top_k.
_ANY_SIZE = Feed("image", (-1, 3, -1, -1))
add(
    Entry(
        "ppyoloe_plus_s_any_size",
        _DET,
        "detection",
        _composite(_ppyoloe(False)),
        (_ANY_SIZE,),
        dynamic=64,
    )
)
add(
    Entry(
        "ppyoloe_plus_s_nms_any_size",
        _DET,
        "detection (NMS)",
        _composite(_ppyoloe(True)),
        (_ANY_SIZE, _SCALE),
        dynamic=64,
    )
)
