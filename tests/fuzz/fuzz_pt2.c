/* fuzz_pt2.c: libFuzzer harness for the .pt2 reader: the zip directory, the model JSON inside it,
 * the weights' configs and their bounds against the stored entries, then what explain runs. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_model_file(fuzz_write(data, size, ".pt2"));
  return 0;
}
