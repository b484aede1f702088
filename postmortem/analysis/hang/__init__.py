"""Why a hang dump's warps wait (barriers, mbarriers, peer flags) and which ones did not move."""
