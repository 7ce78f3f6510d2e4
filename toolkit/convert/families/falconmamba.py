"""FalconMambaForCausalLM -> GGUF ``mamba`` with ``ssm.dt_b_c_rms`` (llama.cpp's FalconMambaModel).

The checkpoint is MambaForCausalLM's, tensor for tensor (see :mod:`.mamba`'s table); the mixer
adds a weightless RMSNorm on each of dt, B and C after ``x_proj`` (HF ``rms_forward`` in
modeling_falcon_mamba.py FalconMambaMixer.slow_forward), which llama.cpp turns on with
``mamba.ssm.dt_b_c_rms = true``.

Epsilon (docs/specs/more-hybrids.md §10 F1): HF takes those norms' epsilon from ``mixer_rms_eps``
(default 1e-6), llama.cpp from ``layer_norm_rms_epsilon`` (HF ``layer_norm_epsilon``, 1e-5):
3.4e-4 relative on a tiny model.  We write HF's value under our own key
``mamba.ssm.dt_b_c_rms_epsilon`` only when it differs, so every key llama.cpp reads keeps its
meaning and the file still loads there (llama.cpp ignores the extra key).
"""
from __future__ import annotations

import numpy as np

from toolkit.convert.config_keys import ConfigKeys
from toolkit.convert.families.mamba import MambaFamily
from toolkit.convert.plan import kv_f32
from toolkit.gguf_io import Keys


class FalconMambaFamily(MambaFamily):
    hf_archs = ("FalconMambaForCausalLM",)
    families = ("FalconMamba",)
    dt_b_c_rms = True
    hf_configs = ("FalconMambaConfig",)
    config_keys = ConfigKeys.of(" ".join(MambaFamily.config_keys.read) + " mixer_rms_eps",
                                refused=MambaFamily.config_keys.refused)

    def read_hparams(self) -> None:
        super().read_hparams()
        # FalconMambaConfig.mixer_rms_eps (default 1e-6); layer_norm_epsilon is self.eps
        self.mixer_eps = self.cfg.eps("mixer_rms_eps", default=1e-6)

    def extra_kv(self) -> list:
        # float32 is what both files hold: compare as float32, or 1e-5 written from a float64
        # config would always differ from its float32 rounding
        if np.float32(self.mixer_eps) == np.float32(self.eps):
            return []
        return [kv_f32(self.key(Keys.SSM.DT_B_C_RMS_EPS), self.mixer_eps)]
