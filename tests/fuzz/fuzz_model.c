/* fuzz_model.c: libFuzzer harness for the ExportedProgram JSON loader, the verifier (shape rules)
 * and what explain runs after them, with a structure-aware mutator (fuzz_mutate.h). */
#include "fuzz_common.h"
#include "fuzz_mutate.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_model_file(fuzz_write(data, size, ".json"));
  return 0;
}
