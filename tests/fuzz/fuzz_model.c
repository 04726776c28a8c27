/* fuzz_model.c: libFuzzer harness for the ExportedProgram JSON loader, the verifier (shape rules),
 * what explain runs after them and the inference pipeline, schedule and code generation of the CPU
 * (inputs of even size) or of --target cuda (odd), with a structure-aware mutator (fuzz_mutate.h). */
#include "fuzz_common.h"
#include "fuzz_mutate.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fuzz_model_file_for(fuzz_write(data, size, ".json"), size % 2);   /* half the inputs on each target's schedule */
  return 0;
}
