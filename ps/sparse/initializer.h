// Moved to shared/train/row_init.h (the worker reads saved tables' absent rows with it too). Kept
// for ps/sparse/embedding_table.h, which includes it, until that file's change in progress lands.
#pragma once

#include "shared/train/row_init.h"
