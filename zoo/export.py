#!/usr/bin/env python3
"""The model zoo (issue 20): exports models of torchvision, timm and transformers as cases in the
corpus's format, for zoo/run.sh to compile with gcc-graph on the CPU and on the GPU.

    python3 zoo/export.py OUTDIR [NAME...] [-j JOBS] [--timeout S]
    python3 zoo/export.py --list

Each model is built with random weights (seed 0; no network: timm with pretrained=False,
transformers from small config objects of 2 layers), put in eval mode, its zero-initialized
parameters redrawn at random (a head or a norm bias left at 0 would make outputs that mean nothing)
and its batch-norm statistics made non-trivial, then run on small inputs. It writes
OUTDIR/NAME/model.pt2 (torch.export.export, then torch.export.save), io.safetensors (in.N, out.N:
PyTorch's float32 outputs, ref64.out.N: the same model run in float64) and case.json (as
tests/extra_src/export.py writes them: tests/compile_case.sh and test-golden --compare read them;
plus source, family, nodes, params, inputs and the versions). Outputs are the model's floating
tensors, flattened in order. A model that PyTorch or its library cannot build, run or export is
recorded in case.json as "status": "export failed" with the reason, and has no model.pt2.

Every model is exported in a process of its own (JOBS at once, default the processors up to 16), so
that one failure or crash stops nothing; OUTDIR/NAME/export.log keeps that process's output.
Needs PyTorch >= 2.9 with torchvision, timm and transformers (any model whose library is missing
is recorded as failed)."""
import argparse
import copy
import dataclasses
import json
import os
import struct
import subprocess
import sys
import time
import traceback
from collections.abc import Mapping

MODELS = {}   # name -> (source, family, make); make() -> (module, inputs)


def reg(name, source, family, make):
    assert name not in MODELS, name
    MODELS[name] = (source, family, make)


# ---------------------------------------------------------------- helpers (torch imported lazily)

def rn(*shape):
    import torch
    return torch.randn(*shape)


def flat(o):
    import torch
    if isinstance(o, torch.Tensor):
        return [o]
    if isinstance(o, (tuple, list)):
        return [t for x in o for t in flat(x)]
    if isinstance(o, Mapping):
        return [t for x in o.values() for t in flat(x)]
    return []


def _call_cls():
    import torch.nn as nn

    class Call(nn.Module):
        """The model called as the zoo exports it: positional tensors in (named keyword arguments for
        transformers), the floating tensors of whatever it returns out, as a flat tuple."""
        def __init__(self, m, names=None, extra=None, fn=None):
            super().__init__()
            self.m, self.names, self.extra, self.fn = m, names, dict(extra or {}), fn

        def forward(self, *a):
            if self.fn is not None:
                o = self.fn(self.m, *a)
            elif self.names:
                o = self.m(**dict(zip(self.names, a)), **self.extra)
            else:
                o = self.m(*a, **self.extra)
            return tuple(t for t in flat(o) if t.is_floating_point())
    return Call


def Call(m, names=None, extra=None, fn=None):
    return _call_cls()(m, names, extra, fn)


# ---------------------------------------------------------------- torchvision

def tv(name, family, arch, shape=(2, 3, 64, 64), **kw):
    def make():
        import torchvision
        return Call(torchvision.models.get_model(arch, weights=None, **kw)), (rn(*shape),)
    reg(name, "torchvision", family, make)


def tv_custom(name, family, build, *shapes, fn=None):
    def make():
        return Call(build(), fn=fn), tuple(rn(*s) for s in shapes)
    reg(name, "torchvision", family, make)


def _tvm():
    import torchvision
    return torchvision.models


tv("tv_resnet18", "CNN", "resnet18")
tv("tv_resnext50_32x4d", "CNN", "resnext50_32x4d", num_classes=100)
tv("tv_densenet121", "CNN", "densenet121", num_classes=100)
tv("tv_mobilenet_v2", "CNN (mobile)", "mobilenet_v2")
tv("tv_mobilenet_v3_small", "CNN (mobile)", "mobilenet_v3_small")
tv("tv_mnasnet0_5", "CNN (mobile)", "mnasnet0_5")
tv("tv_shufflenet_v2_x0_5", "CNN (mobile)", "shufflenet_v2_x0_5")
tv("tv_squeezenet1_1", "CNN", "squeezenet1_1")
tv("tv_googlenet", "CNN", "googlenet", aux_logits=False, init_weights=True)
tv("tv_inception_v3", "CNN", "inception_v3", shape=(2, 3, 96, 96), aux_logits=False, init_weights=True)
tv("tv_efficientnet_b0", "CNN (mobile)", "efficientnet_b0")
tv("tv_efficientnet_v2_s", "CNN", "efficientnet_v2_s", num_classes=100)
tv("tv_regnet_y_400mf", "CNN", "regnet_y_400mf")
tv("tv_convnext_tiny", "CNN", "convnext_tiny", num_classes=100)
tv_custom("tv_vit", "vision transformer", lambda: _tvm().vision_transformer.VisionTransformer(
    image_size=64, patch_size=16, num_layers=2, num_heads=4, hidden_dim=64, mlp_dim=128, num_classes=10), (2, 3, 64, 64))
tv_custom("tv_swin", "hierarchical ViT", lambda: _tvm().swin_transformer.SwinTransformer(
    patch_size=[4, 4], embed_dim=32, depths=[2, 2, 2, 2], num_heads=[2, 4, 8, 16], window_size=[4, 4],
    stochastic_depth_prob=0.0, num_classes=10), (2, 3, 64, 64))
tv_custom("tv_swin_v2", "hierarchical ViT", lambda: _tvm().swin_transformer.SwinTransformer(
    patch_size=[4, 4], embed_dim=32, depths=[2, 2, 2, 2], num_heads=[2, 4, 8, 16], window_size=[4, 4],
    stochastic_depth_prob=0.0, num_classes=10, block=_tvm().swin_transformer.SwinTransformerBlockV2,
    downsample_layer=_tvm().swin_transformer.PatchMergingV2), (2, 3, 64, 64))
tv_custom("tv_maxvit", "hybrid CNN-transformer", lambda: _tvm().maxvit.MaxVit(
    input_size=(64, 64), stem_channels=16, partition_size=2, block_channels=[16, 32, 64, 128], block_layers=[1, 1, 1, 1],
    head_dim=8, stochastic_depth_prob=0.0, num_classes=10), (2, 3, 64, 64))
tv("tv_r3d_18", "video CNN", "r3d_18", shape=(1, 3, 8, 32, 32), num_classes=10)
tv("tv_mc3_18", "video CNN", "mc3_18", shape=(1, 3, 8, 32, 32), num_classes=10)
tv("tv_r2plus1d_18", "video CNN", "r2plus1d_18", shape=(1, 3, 8, 32, 32), num_classes=10)
tv("tv_fcn_resnet50", "segmentation", "fcn_resnet50", weights_backbone=None, num_classes=5, aux_loss=False)
tv("tv_deeplabv3_mobilenet_v3", "segmentation", "deeplabv3_mobilenet_v3_large", weights_backbone=None, num_classes=5)
tv("tv_lraspp_mobilenet_v3", "segmentation", "lraspp_mobilenet_v3_large", weights_backbone=None, num_classes=5)
def _raft():
    # RAFT makes its coordinate grids in float32 whatever the model's dtype: in the default dtype
    # instead (float32 for the export, float64 for the reference)
    import torch
    from torchvision.models.optical_flow import raft
    if not getattr(raft.make_coords_grid, "zoo", False):
        grid = raft.make_coords_grid
        raft.make_coords_grid = lambda *a, **k: grid(*a, **k).to(torch.get_default_dtype())
        raft.make_coords_grid.zoo = True
    return raft.raft_small(weights=None)


tv_custom("tv_raft_small", "optical flow", _raft, (1, 3, 128, 128), (1, 3, 128, 128),
          fn=lambda m, a, b: m(a, b, num_flow_updates=3))


def _det(arch):
    return lambda: _tvm().get_model(arch, weights=None, weights_backbone=None, num_classes=10)


# detection models up to their heads' outputs (class logits, box regressions): the post-processing
# (anchors, NMS) is data-dependent and outside what torch.export captures
tv_custom("tv_retinanet_head", "detection head", _det("retinanet_resnet50_fpn"), (1, 3, 128, 128),
          fn=lambda m, x: m.head(list(m.backbone(x).values())))
tv_custom("tv_ssdlite_head", "detection head", _det("ssdlite320_mobilenet_v3_large"), (1, 3, 128, 128),
          fn=lambda m, x: m.head(list(m.backbone(x).values())))
tv_custom("tv_fasterrcnn_rpn_head", "detection head", _det("fasterrcnn_mobilenet_v3_large_fpn"), (1, 3, 128, 128),
          fn=lambda m, x: m.rpn.head(list(m.backbone(x).values())))


# ---------------------------------------------------------------- timm

def tm(arch, family, size=64, batch=2, **kw):
    def make():
        import timm
        return Call(timm.create_model(arch, pretrained=False, num_classes=100, **kw)), (rn(batch, 3, size, size),)
    name = "timm_" + arch.replace("_patch16_224", "").replace("_224", "")
    reg(name, "timm", family, make)


tm("vit_tiny_patch16_224", "vision transformer", img_size=64)
tm("deit_tiny_distilled_patch16_224", "vision transformer", img_size=64)
tm("cait_xxs24_224", "vision transformer", img_size=64, depth=4)
tm("xcit_nano_12_p16_224", "vision transformer", img_size=64, depth=4)
tm("beit_base_patch16_224", "vision transformer", img_size=64, depth=2)
tm("eva02_tiny_patch14_224", "vision transformer", size=56, img_size=56, depth=4)
tm("tnt_s_patch16_224", "vision transformer", img_size=64)
tm("volo_d1_224", "vision transformer", img_size=64)
tm("crossvit_tiny_240", "vision transformer", size=240, batch=1)
tm("coat_lite_tiny", "vision transformer", img_size=64)
tm("swin_tiny_patch4_window7_224", "hierarchical ViT", img_size=64, window_size=4, depths=(2, 2, 2, 2))
tm("swinv2_tiny_window8_256", "hierarchical ViT", img_size=64, window_size=4, depths=(2, 2, 2, 2))
tm("pvt_v2_b0", "hierarchical ViT")
tm("twins_svt_small", "hierarchical ViT", img_size=64)
tm("davit_tiny", "hierarchical ViT")
tm("hiera_tiny_224", "hierarchical ViT", size=224, batch=1)
tm("mvitv2_tiny", "hierarchical ViT", size=224, batch=1)
tm("levit_128s", "hybrid CNN-transformer", size=224, batch=1)
tm("efficientformer_l1", "hybrid CNN-transformer", size=224, batch=1)
tm("mobilevit_xxs", "hybrid CNN-transformer")
tm("efficientvit_b0", "hybrid CNN-transformer")
tm("fastvit_t8", "hybrid CNN-transformer")
tm("edgenext_xx_small", "hybrid CNN-transformer")
tm("botnet26t_256", "hybrid CNN-transformer", size=128, batch=1, img_size=128)
tm("vit_tiny_r_s16_p8_224", "hybrid CNN-transformer", img_size=64)
tm("mixer_s16_224", "MLP mixer", img_size=64)
tm("resmlp_12_224", "MLP mixer", img_size=64)
tm("gmlp_ti16_224", "MLP mixer", img_size=64)
tm("poolformer_s12", "MetaFormer")
tm("convmixer_768_32", "ConvMixer")
tm("sequencer2d_s", "LSTM mixer", size=224, batch=1)
tm("convnext_atto", "CNN")
tm("convnextv2_atto", "CNN")
tm("hrnet_w18_small", "CNN")
tm("dla34", "CNN")
tm("dpn68", "CNN")
tm("repvgg_a0", "CNN")
tm("nf_regnet_b0", "CNN")
tm("regnety_002", "CNN")
tm("cspresnet50", "CNN")
tm("resnest14d", "CNN")
tm("skresnet18", "CNN")
tm("resnetv2_50x1_bit", "CNN")
tm("ghostnet_100", "CNN (mobile)")
tm("mixnet_s", "CNN (mobile)")
tm("tf_efficientnet_b0", "CNN (mobile)")
tm("mobilenetv4_conv_small", "CNN (mobile)")


# ---------------------------------------------------------------- transformers

def mkcfg(cls, **kw):
    """A transformers config from keyword arguments, for the versions whose configs are strict
    dataclasses too: aliases (attribute_map) go to their field, an int given for a float field
    becomes a float (a whole float for an int field an int) and a tuple a list (or the reverse) as
    the field's default has it; arguments that are no field go to the config as they are, or where
    it refuses them are dropped (listed in the config's zoo_dropped, and in case.json)."""
    if not dataclasses.is_dataclass(cls):
        return cls(**kw)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    amap = getattr(cls, "attribute_map", None) or {}
    out, extra = {}, {}
    for k, v in kw.items():
        if k not in fields and k in amap:
            k = amap[k]
        if k not in fields:
            extra[k] = v
            continue
        f = fields[k]
        d = f.default if f.default is not dataclasses.MISSING else (f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
        ty = str(f.type)
        if isinstance(v, int) and not isinstance(v, bool) and (isinstance(d, float) or (d is None and "float" in ty and "int" not in ty)):
            v = float(v)
        elif isinstance(v, float) and v.is_integer() and ((isinstance(d, int) and not isinstance(d, bool)) or (d is None and "int" in ty and "float" not in ty)):
            v = int(v)
        elif isinstance(v, tuple) and (isinstance(d, list) or (d is None and ty.startswith("list"))):
            v = list(v)
        elif isinstance(v, list) and (isinstance(d, tuple) or (d is None and ty.startswith("tuple"))):
            v = tuple(v)
        if isinstance(v, (list, tuple)) and isinstance(d, (list, tuple)) and d and all(isinstance(x, float) for x in d):
            v = type(v)(float(x) if isinstance(x, int) else x for x in v)
        out[k] = v
    try:   # arguments that are no field (num_labels, older names) go to the config's __post_init__
        return cls(**out, **extra)
    except Exception:
        if not extra:
            raise
    c = cls(**out)
    try:
        object.__setattr__(c, "zoo_dropped", sorted(extra))
    except Exception:
        pass
    return c


def ids(b=2, s=16, v=256, name="input_ids"):
    import torch
    return (name, torch.randint(3, v, (b, s)))


def amask(b=2, s=16):
    import torch
    m = torch.ones(b, s, dtype=torch.int64)
    m[-1, -4:] = 0   # the last sequence padded: its last 4 tokens masked
    return ("attention_mask", m)


def pix(b=2, size=32, name="pixel_values"):
    return (name, rn(b, 3, size, size))


def hf(name, family, cfg, model_cls, inputs, extra=None):
    """cfg: (config class name, keyword arguments) or a function of the transformers module."""
    def make():
        import transformers as tf
        c = cfg(tf) if callable(cfg) else mkcfg(getattr(tf, cfg[0]), **cfg[1])
        m = getattr(tf, model_cls)(c)
        if getattr(m.config, "use_cache", None):
            m.config.use_cache = False
        ins = inputs()
        return Call(m, [k for k, _ in ins], extra), tuple(t for _, t in ins)
    reg(name, "transformers", family, make)


ENC = dict(vocab_size=256, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, max_position_embeddings=64)
enc_in = lambda: [ids(), amask()]
hf("hf_bert", "text encoder", ("BertConfig", ENC), "BertModel", enc_in)
hf("hf_roberta", "text encoder", ("RobertaConfig", dict(ENC, pad_token_id=1)), "RobertaModel", enc_in)
hf("hf_distilbert", "text encoder", ("DistilBertConfig", dict(vocab_size=256, dim=64, n_layers=2, n_heads=4, hidden_dim=128, max_position_embeddings=64)),
   "DistilBertModel", enc_in)
hf("hf_albert", "text encoder", ("AlbertConfig", dict(ENC, embedding_size=32)), "AlbertModel", enc_in)
hf("hf_electra", "text encoder", ("ElectraConfig", dict(ENC, embedding_size=32)), "ElectraModel", enc_in)
hf("hf_deberta_v2", "text encoder", ("DebertaV2Config", dict(ENC, relative_attention=True, position_buckets=16, norm_rel_ebd="layer_norm",
                                                             share_att_key=True, pos_att_type=["p2c", "c2p"], position_biased_input=False,
                                                             max_relative_positions=-1)), "DebertaV2Model", enc_in)
hf("hf_mpnet", "text encoder", ("MPNetConfig", dict(ENC, relative_attention_num_buckets=32)), "MPNetModel", enc_in)
hf("hf_convbert", "text encoder", ("ConvBertConfig", dict(ENC, embedding_size=64, head_ratio=2, conv_kernel_size=9)), "ConvBertModel", enc_in)

DEC = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
           max_position_embeddings=64, pad_token_id=0, bos_token_id=1, eos_token_id=2)
dec_in = lambda: [ids()]
NOCACHE = {"use_cache": False}
GPT = dict(vocab_size=256, n_positions=64, n_embd=64, n_layer=2, n_head=4, bos_token_id=1, eos_token_id=2)
hf("hf_gpt2", "decoder LM", ("GPT2Config", GPT), "GPT2LMHeadModel", dec_in, NOCACHE)
hf("hf_gpt_neo", "decoder LM", ("GPTNeoConfig", dict(vocab_size=256, max_position_embeddings=64, hidden_size=64, num_layers=2, num_heads=4,
                                                   intermediate_size=128, attention_types=[[["global", "local"], 1]], window_size=8,
                                                   bos_token_id=1, eos_token_id=2)), "GPTNeoForCausalLM", dec_in, NOCACHE)
hf("hf_gptj", "decoder LM", ("GPTJConfig", dict(GPT, rotary_dim=8)), "GPTJForCausalLM", dec_in, NOCACHE)
hf("hf_gpt_bigcode", "decoder LM", ("GPTBigCodeConfig", dict(GPT, multi_query=True)), "GPTBigCodeForCausalLM", dec_in, NOCACHE)
hf("hf_llama", "decoder LM", ("LlamaConfig", DEC), "LlamaForCausalLM", dec_in, NOCACHE)
hf("hf_mistral", "decoder LM", ("MistralConfig", dict(DEC, sliding_window=8)), "MistralForCausalLM", dec_in, NOCACHE)
hf("hf_qwen2", "decoder LM", ("Qwen2Config", DEC), "Qwen2ForCausalLM", dec_in, NOCACHE)
hf("hf_qwen3", "decoder LM", ("Qwen3Config", dict(DEC, head_dim=16)), "Qwen3ForCausalLM", dec_in, NOCACHE)
hf("hf_phi", "decoder LM", ("PhiConfig", dict(DEC, partial_rotary_factor=0.5)), "PhiForCausalLM", dec_in, NOCACHE)
hf("hf_phi3", "decoder LM", ("Phi3Config", dict(DEC, original_max_position_embeddings=64)), "Phi3ForCausalLM", dec_in, NOCACHE)
hf("hf_opt", "decoder LM", ("OPTConfig", dict(vocab_size=256, hidden_size=64, num_hidden_layers=2, ffn_dim=128, num_attention_heads=4,
                                            max_position_embeddings=64, word_embed_proj_dim=64)), "OPTForCausalLM", dec_in, NOCACHE)
hf("hf_bloom", "decoder LM", ("BloomConfig", dict(vocab_size=256, hidden_size=64, n_layer=2, n_head=4, pad_token_id=0, bos_token_id=1,
                                                eos_token_id=2)), "BloomForCausalLM", dec_in, NOCACHE)
hf("hf_falcon", "decoder LM", ("FalconConfig", dict(vocab_size=256, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                                  max_position_embeddings=64, bos_token_id=1, eos_token_id=2)), "FalconForCausalLM", dec_in, NOCACHE)
hf("hf_gemma", "decoder LM", ("GemmaConfig", dict(DEC, num_key_value_heads=1, head_dim=16)), "GemmaForCausalLM", dec_in, NOCACHE)
hf("hf_gemma2", "decoder LM", ("Gemma2Config", dict(DEC, head_dim=16, sliding_window=8, query_pre_attn_scalar=16)), "Gemma2ForCausalLM",
   dec_in, NOCACHE)
hf("hf_stablelm", "decoder LM", ("StableLmConfig", dict(DEC, partial_rotary_factor=0.25)), "StableLmForCausalLM", dec_in, NOCACHE)
hf("hf_starcoder2", "decoder LM", ("Starcoder2Config", DEC), "Starcoder2ForCausalLM", dec_in, NOCACHE)
hf("hf_olmo", "decoder LM", ("OlmoConfig", dict(DEC, num_key_value_heads=4)), "OlmoForCausalLM", dec_in, NOCACHE)
hf("hf_mixtral", "decoder LM (MoE)", ("MixtralConfig", dict(DEC, num_local_experts=4, num_experts_per_tok=2)), "MixtralForCausalLM",
   dec_in, NOCACHE)

S2S = dict(vocab_size=256, d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
           encoder_ffn_dim=128, decoder_ffn_dim=128, max_position_embeddings=64)
s2s_in = lambda: [ids(), ids(s=8, name="decoder_input_ids")]
hf("hf_t5", "encoder-decoder", ("T5Config", dict(vocab_size=256, d_model=64, d_kv=16, d_ff=128, num_layers=2, num_decoder_layers=2, num_heads=4,
                                               relative_attention_num_buckets=8, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)),
   "T5Model", s2s_in, NOCACHE)
hf("hf_bart", "encoder-decoder", ("BartConfig", dict(S2S, pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2)),
   "BartModel", s2s_in, NOCACHE)
hf("hf_marian", "encoder-decoder", ("MarianConfig", dict(S2S, decoder_vocab_size=256, pad_token_id=0, eos_token_id=2, decoder_start_token_id=0)),
   "MarianMTModel", s2s_in, NOCACHE)
hf("hf_pegasus", "encoder-decoder", ("PegasusConfig", dict(S2S, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0)),
   "PegasusModel", s2s_in, NOCACHE)

hf("hf_whisper", "speech encoder-decoder", ("WhisperConfig", dict(vocab_size=256, num_mel_bins=16, encoder_layers=2, encoder_attention_heads=4,
                                                                decoder_layers=2, decoder_attention_heads=4, encoder_ffn_dim=128,
                                                                decoder_ffn_dim=128, d_model=64, max_source_positions=32,
                                                                max_target_positions=32, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                                                decoder_start_token_id=1)),
   "WhisperModel", lambda: [("input_features", rn(2, 16, 64)), ids(s=8, name="decoder_input_ids")], NOCACHE)
W2V = dict(vocab_size=32, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, conv_dim=[32] * 7,
           num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4)
wav_in = lambda: [("input_values", rn(2, 4000))]
hf("hf_wav2vec2", "audio encoder", ("Wav2Vec2Config", W2V), "Wav2Vec2Model", wav_in)
hf("hf_hubert", "audio encoder", ("HubertConfig", W2V), "HubertModel", wav_in)
hf("hf_wavlm", "audio encoder", ("WavLMConfig", dict(W2V, num_buckets=32, max_bucket_distance=64)), "WavLMModel", wav_in)
hf("hf_ast", "audio encoder", ("ASTConfig", dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, patch_size=16,
                                               frequency_stride=10, time_stride=10, max_length=64, num_mel_bins=32, num_labels=5)),
   "ASTForAudioClassification", lambda: [("input_values", rn(2, 64, 32))])

VIT = dict(image_size=32, patch_size=8, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)
hf("hf_vit", "vision transformer", ("ViTConfig", dict(VIT, num_labels=10)), "ViTForImageClassification", lambda: [pix()])
hf("hf_deit", "vision transformer", ("DeiTConfig", dict(VIT, num_labels=10)), "DeiTForImageClassificationWithTeacher", lambda: [pix()])
hf("hf_dinov2", "vision transformer", ("Dinov2Config", dict(VIT, mlp_ratio=2.0)), "Dinov2Model", lambda: [pix()])
hf("hf_swin", "hierarchical ViT", ("SwinConfig", dict(image_size=32, patch_size=2, embed_dim=16, depths=[1, 1, 2], num_heads=[1, 2, 4],
                                                    window_size=4, num_labels=10)), "SwinForImageClassification", lambda: [pix()])
hf("hf_convnext", "CNN", ("ConvNextConfig", dict(hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 2, 1], num_labels=10)),
   "ConvNextForImageClassification", lambda: [pix(size=64)])
hf("hf_segformer", "segmentation", ("SegformerConfig", dict(num_encoder_blocks=4, depths=[1, 1, 1, 1], sr_ratios=[8, 4, 2, 1],
                                                          hidden_sizes=[16, 32, 64, 128], num_attention_heads=[1, 2, 4, 8],
                                                          decoder_hidden_size=64, num_labels=5)),
   "SegformerForSemanticSegmentation", lambda: [pix(size=64)])
hf("hf_mobilevit", "hybrid CNN-transformer", ("MobileViTConfig", dict(image_size=64, hidden_sizes=[64, 80, 96],
                                                                    neck_hidden_sizes=[16, 16, 24, 48, 64, 80, 320], num_labels=10)),
   "MobileViTForImageClassification", lambda: [pix(size=64)])
hf("hf_yolos", "detection head", ("YolosConfig", dict(image_size=[64, 64], patch_size=16, hidden_size=64, num_hidden_layers=2,
                                                    num_attention_heads=4, intermediate_size=128, num_detection_tokens=10, num_labels=5)),
   "YolosForObjectDetection", lambda: [pix(b=1, size=64)])
hf("hf_clip", "vision-language", lambda tf: mkcfg(
    tf.CLIPConfig, projection_dim=32,
    text_config=mkcfg(tf.CLIPTextConfig, vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      max_position_embeddings=32, pad_token_id=0, bos_token_id=1, eos_token_id=2),
    vision_config=mkcfg(tf.CLIPVisionConfig, image_size=32, patch_size=8, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4)),
   "CLIPModel", lambda: [ids(), pix()])


# ---------------------------------------------------------------- one model (in its own process)

def save_st(path, tensors):
    import torch
    st = {torch.float32: "F32", torch.float64: "F64", torch.float16: "F16", torch.bfloat16: "BF16", torch.int64: "I64",
          torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8", torch.bool: "BOOL"}
    hdr, blobs, off = {}, [], 0
    for k, t in tensors.items():
        t = t.detach().contiguous().cpu()
        b = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        hdr[k] = {"dtype": st[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(hdr).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def randomize(mod):
    """Redraw all-zero floating parameters (biases and norm shifts at N(0, 0.1), matrices at N(0, 0.02))
    and give batch norms running statistics other than 0 and 1."""
    import torch
    g = torch.Generator().manual_seed(1)
    redrawn = 0
    with torch.no_grad():
        for _, p in mod.named_parameters():
            if p.is_floating_point() and p.numel() and not p.any():
                p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64).to(p.dtype) * (0.1 if p.dim() <= 1 else 0.02))
                redrawn += 1
        for m in mod.modules():
            if isinstance(m, torch.nn.modules.batchnorm._BatchNorm) and m.running_mean is not None:
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=g, dtype=torch.float64).to(m.running_mean.dtype) * 0.1)
                m.running_var.copy_((torch.rand(m.running_var.shape, generator=g, dtype=torch.float64) + 0.5).to(m.running_var.dtype))
    return redrawn


def run64(mod, inputs):
    """The model in float64 on float64 inputs, with float64 the default dtype (tensors a model makes
    as it runs then follow); without it if that fails; then a mixture of experts with its experts'
    plain loop (the float32 export keeps transformers' default)."""
    import torch
    m64 = copy.deepcopy(mod).to(torch.float64)
    in64 = [t.double() if t.is_floating_point() else t for t in inputs]
    old, err = torch.get_default_dtype(), None
    for attempt in range(3):
        if attempt == 2:   # transformers' grouped products of experts (MoE) take no float64: the reference with its loop over experts
            inner = getattr(m64, "m", None)
            if not hasattr(inner, "set_experts_implementation"):
                break
            inner.set_experts_implementation("eager")
        try:
            torch.set_default_dtype(torch.float64 if attempt != 1 else old)
            return list(m64(*in64))
        except Exception as e:
            err = err or e
        finally:
            torch.set_default_dtype(old)
    raise err


def versions():
    v = {}
    for lib in ("torch", "torchvision", "timm", "transformers"):
        if lib in sys.modules:
            v[lib] = getattr(sys.modules[lib], "__version__", "?")
    return v


def export_one(out, name):
    source, family, make = MODELS[name]
    d = os.path.join(out, name)
    os.makedirs(d, exist_ok=True)
    for f in ("model.pt2", "io.safetensors", "case.json"):
        if os.path.exists(os.path.join(d, f)):
            os.remove(os.path.join(d, f))
    meta = {"name": name, "group": "zoo", "kind": "inference", "source": source, "family": family}
    stage, t0 = "import", time.time()
    try:
        import torch
        torch.set_num_threads(int(os.environ.get("ZOO_THREADS", "1")))
        torch.manual_seed(0)
        stage = "build"
        mod, inputs = make()
        mod = mod.eval()
        meta["redrawn_parameters"] = randomize(mod)
        dropped = getattr(getattr(getattr(mod, "m", None), "config", None), "zoo_dropped", None)
        if dropped:
            meta["config_dropped"] = dropped
        meta["params"] = sum(p.numel() for p in mod.parameters())
        meta["inputs"] = [{"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", "")} for t in inputs]
        stage = "run (float32)"
        with torch.no_grad():
            outs = list(mod(*inputs))
            if not outs:
                raise RuntimeError("the model returns no floating tensor")
            nan = [i for i, t in enumerate(outs) if torch.isnan(t).any()]
            if nan:
                raise RuntimeError(f"PyTorch's float32 outputs {nan} hold NaN: nothing to compare")
            stage = "run (float64)"
            ref = run64(mod, inputs)
        stage = "torch.export"
        ep = torch.export.export(mod, inputs)
        stage = "save"
        nodes = [n for n in ep.graph.nodes if n.op == "call_function"]
        meta["nodes"] = len(nodes)
        meta["ops"] = sorted({str(n.target) for n in nodes})
        torch.export.save(ep, os.path.join(d, "model.pt2"))
        io = {f"in.{i}": t for i, t in enumerate(inputs)}
        io.update({f"out.{i}": t for i, t in enumerate(outs)})
        io.update({f"ref64.out.{i}": t for i, t in enumerate(ref)})
        save_st(os.path.join(d, "io.safetensors"), io)
        meta["outputs"] = [list(t.shape) for t in outs]
        meta["pytorch_f32_error"] = [float((o.double() - r).norm() / r.norm().clamp_min(1e-30)) for o, r in zip(outs, ref)]
        meta["status"] = "ok"
    except BaseException as e:   # noqa: BLE001 (a model's failure is a result)
        traceback.print_exc()
        msg = " ".join(f"{type(e).__name__}: {e}".split())
        meta["status"] = "export failed"
        meta["error"] = f"{stage}: {msg[:400]}"
    meta["export_seconds"] = round(time.time() - t0, 1)
    meta["torch_version"] = versions().get("torch", "?")
    meta["versions"] = versions()
    with open(os.path.join(d, "case.json"), "w") as f:
        json.dump(meta, f, indent=1)
    return meta


# ---------------------------------------------------------------- all of them

def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    p.add_argument("out", nargs="?", help="the folder to write the cases into")
    p.add_argument("names", nargs="*", help="models to export (default: all; --list lists them); a name ending in * is a prefix")
    p.add_argument("-j", "--jobs", type=int, default=min(16, os.cpu_count() or 1), help="processes at once (default: the processors, up to 16)")
    p.add_argument("--timeout", type=float, default=600, help="seconds one model's export may take (default 600)")
    p.add_argument("--list", action="store_true", help="list the models: name, library, family")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.list:
        for n, (src, fam, _) in MODELS.items():
            print(f"{n}\t{src}\t{fam}")
        return 0
    if not a.out:
        p.error("OUTDIR is needed")
    if a.worker:
        meta = export_one(a.out, a.names[0])
        print("ZOO-RESULT " + json.dumps({k: meta.get(k) for k in ("status", "error", "nodes", "export_seconds")}), flush=True)
        return 0
    names = []
    for n in a.names or list(MODELS):
        hits = [m for m in MODELS if (m.startswith(n[:-1]) if n.endswith("*") else m == n)]
        if not hits:
            p.error(f"no model '{n}' (--list lists them)")
        names += [h for h in hits if h not in names]
    os.makedirs(a.out, exist_ok=True)
    asked = os.path.join(a.out, "zoo_export.json")   # the models asked for, which zoo/table.py lists
    before = json.load(open(asked)).get("models", []) if os.path.exists(asked) else []
    with open(asked, "w") as f:
        json.dump({"models": before + [n for n in names if n not in before]}, f, indent=1)
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("ZOO_THREADS", "1"), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1")

    def run(name):
        d = os.path.join(a.out, name)
        os.makedirs(d, exist_ok=True)
        t0 = time.time()
        with open(os.path.join(d, "export.log"), "w") as log:
            try:
                r = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", a.out, name], stdout=subprocess.PIPE,
                                   stderr=log, text=True, env=env, timeout=a.timeout)
                log.write(r.stdout)
                res = [json.loads(line[11:]) for line in r.stdout.splitlines() if line.startswith("ZOO-RESULT ")]
                if res:
                    return name, res[-1]
                why = f"the export process ended with status {r.returncode} and no result (a crash?)"
            except subprocess.TimeoutExpired:
                why = f"the export took more than {a.timeout:.0f} s"
        src, fam, _ = MODELS[name]
        meta = {"name": name, "group": "zoo", "kind": "inference", "source": src, "family": fam, "status": "export failed",
                "error": why, "export_seconds": round(time.time() - t0, 1)}
        with open(os.path.join(d, "case.json"), "w") as f:
            json.dump(meta, f, indent=1)
        return name, meta

    from concurrent.futures import ThreadPoolExecutor, as_completed
    t0, ok = time.time(), 0
    with ThreadPoolExecutor(max(1, a.jobs)) as pool:
        for fut in as_completed([pool.submit(run, n) for n in names]):
            name, r = fut.result()
            if r.get("status") == "ok":
                ok += 1
                print(f"ok {name} ({r.get('nodes')} nodes, {r.get('export_seconds')} s)", flush=True)
            else:
                print(f"export failed {name}: {r.get('error')}", flush=True)
    print(f"zoo: {ok} of {len(names)} models exported into {a.out} in {time.time() - t0:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
