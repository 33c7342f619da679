#pragma once
#include <nfc/nfc.h>
