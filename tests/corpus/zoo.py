"""The corpus: architectures built from the Paddle ecosystem packages' own code.

Each Entry names the package module and factory that builds its Layer (random weights, fixed
seed, small configurations and inputs), its feeds, and its category. `build()` runs only inside
export.py's subprocess, where the packages are importable (ecosystem.enable()).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final


@dataclass(frozen=True)
class Feed:
    """One input: its InputSpec (-1 = batch or a dynamic dim) and, for ints, the value range."""

    name: str
    shape: tuple[int, ...]
    dtype: str = "float32"
    high: int = 0  # ints drawn from [0, high)


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


def _from(module: str, factory: str, run_init: tuple[str, ...] = (), **kwargs: Any) -> Callable[[], Any]:
    """A factory: `module.factory(**kwargs)` imported with ecosystem.load."""

    def build() -> Any:
        from tests.corpus import ecosystem

        ecosystem.enable(run_init)
        return getattr(ecosystem.load(module), factory)(**kwargs)

    build.__qualname__ = f"{module}.{factory}"
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
    ("vgg11", f"{_LEGENDARY}.vgg", "VGG11", 64, {}),
    ("inception_v3", f"{_LEGENDARY}.inception_v3", "InceptionV3", 96, {}),
    ("swin_tiny", f"{_LEGENDARY}.swin_transformer", "SwinTransformer_tiny_patch4_window7_224", 224, {}),
    ("repvgg_a0", f"{_ZOO}.repvgg", "RepVGG_A0", 64, {}),
    ("rexnet_1_0", f"{_ZOO}.rexnet", "ReXNet_1_0", 64, {}),
    ("ghostnet_x0_5", f"{_ZOO}.ghostnet", "GhostNet_x0_5", 64, {}),
    ("mixnet_s", f"{_ZOO}.mixnet", "MixNet_S", 64, {}),
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
