// Host-emulation stand-in (tests/emu): everything lives in lm_emu.h.
#pragma once
#include "lm_emu.h"
