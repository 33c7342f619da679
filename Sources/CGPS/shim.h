#pragma once
#include <gps.h>
