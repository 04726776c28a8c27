/* gcc_graph.h: the entry points of a model compiled by gcc-graph.
 *
 * A compiled model is a shared object with no dependency on PyTorch or Python. Tensors cross the
 * boundary as DLPack DLTensors, so NumPy, PyTorch, JAX and CuPy arrays pass without copies. Every
 * function returns 0 on success and 1 when it refuses (a guard failure, a bad argument), with a
 * message in err (NUL-terminated, truncated to errlen). A model may be run by several threads at
 * once: each call uses its own scratch memory. Models that mutate buffers (batch-norm statistics in
 * training mode, counters) serialize their runs, because the buffers they hold are shared state.
 *
 * Load with dlopen(path, RTLD_NOW | RTLD_LOCAL) and look the symbols up, or link against the .so. */
#ifndef GCC_GRAPH_H
#define GCC_GRAPH_H

#include <dlpack/dlpack.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define GG_ABI_VERSION 1

typedef struct gg_model gg_model;

/* The model's metadata, a JSON document (schemas/metadata.schema.json): inputs, outputs, dtypes,
 * sizes with symbols and ranges, weights, guards, compiler version. Static storage. */
const char *gg_metadata(void);
int gg_abi_version(void);
int gg_num_inputs(void);
int gg_num_outputs(void);

/* Open the model. weights: NULL when the weights are inside the .so; else the .pt2 or .safetensors
 * file they were left in (compile --weights external), mapped read-only. */
int gg_open(gg_model **model, const char *weights, char *err, size_t errlen);
void gg_close(gg_model *model);

/* Check inputs against the guards: count, dtype, rank, static sizes, symbolic sizes within their
 * ranges and consistent across inputs, strides (row-major compact) and device (CPU). */
int gg_check(const gg_model *model, const DLTensor *inputs, int ninputs, char *err, size_t errlen);

/* The shape of output i for these inputs: ndim and shape (at most 16 dims), and its DLDataType. */
int gg_output_shape(const gg_model *model, const DLTensor *inputs, int ninputs, int i, int *ndim, int64_t *shape,
                    DLDataType *dtype, char *err, size_t errlen);

/* Run with caller-provided outputs (CPU, row-major compact, the shapes gg_output_shape gives). */
int gg_run(gg_model *model, const DLTensor *inputs, int ninputs, DLTensor *outputs, int noutputs, char *err, size_t errlen);

/* Run and let the library allocate the outputs; free each with its deleter. */
int gg_run_alloc(gg_model *model, const DLTensor *inputs, int ninputs, DLManagedTensor **outputs, int noutputs,
                 char *err, size_t errlen);

/* Where inputs and outputs live: kDLCPU, or kDLCUDA for a model compiled with --target cuda. A CUDA
 * model takes and gives device tensors (host tensors are refused by the guards), uploads its weights
 * at gg_open, replays its kernels as a CUDA graph, and returns from gg_run when its work is done. */
int gg_device_type(void);

/* Random ops (rand, randn, randperm, dropout in training) draw from a counter-based generator seeded
 * by GCC_GRAPH_SEED (default 0); each execution of one takes the process's next draw. This starts
 * over from `seed`, like torch.manual_seed (the numbers are not PyTorch's: the distributions are). */
void gg_manual_seed(uint64_t seed);
/* CUDA models: queue runs on `stream` (a cudaStream_t; NULL: the model's own stream, where each run
 * first waits for the work queued on the legacy default stream, as a blocking stream would). */
int gg_set_stream(gg_model *model, void *stream);
/* CUDA models: device memory for programs with no CUDA of their own (allocate, free, copy to the
 * device when to_device, else back to the host; 0 on success). */
void *gg_device_alloc(size_t bytes);
void gg_device_free(void *p);
int gg_device_copy(void *dst, const void *src, size_t bytes, int to_device);

/* Buffers the model mutates (their current values, after the last run), by index and name. */
int gg_num_mutated_buffers(void);
int gg_mutated_buffer(const gg_model *model, int i, const char **name, DLTensor *value);

/* ---- training (a .so compiled with gcc-graph compile --train)
 *
 * The forward runs like gg_run and keeps what the backward needs in a training state the caller
 * owns (one per thread of training); the backward computes the gradient of the loss (the output
 * chosen with --loss, output 0 by default) for every parameter that requires grad. gg_train_step
 * runs both and applies the optimizer chosen with --optimizer to the parameters the model holds
 * (read them back with gg_weight). A CUDA training model (--train --target cuda) keeps its
 * parameters, optimizer state, saved values and gradients on the GPU (gg_gradient gives device
 * tensors; grad_loss is a device tensor), and captures a whole gg_train_step (forward, backward,
 * update) as one CUDA graph, replayed while the inputs keep their shapes and addresses. */
typedef struct gg_train_state gg_train_state;
int gg_num_gradients(void);   /* 0: not a training model */
int gg_train_state_new(const gg_model *model, gg_train_state **state, char *err, size_t errlen);
void gg_train_state_free(gg_train_state *state);
int gg_forward(gg_model *model, gg_train_state *state, const DLTensor *inputs, int ninputs, DLTensor *outputs, int noutputs,
               char *err, size_t errlen);
/* grad_loss: the loss's gradient (one element, the loss's dtype), or NULL for 1. Once per gg_forward:
 * the gradients take the memory of the values the forward saved (a second backward is refused). */
int gg_backward(gg_model *model, gg_train_state *state, const DLTensor *grad_loss, char *err, size_t errlen);
/* Gradient i of the last backward, and its name: valid until the next forward or backward with this
 * state (the gradients take the memory of the values the forward saved once those are dead). */
int gg_gradient(const gg_train_state *state, int i, const char **name, DLTensor *value);
int gg_train_step(gg_model *model, gg_train_state *state, const DLTensor *inputs, int ninputs, DLTensor *outputs, int noutputs,
                  char *err, size_t errlen);
/* Change the optimizer's learning rate (a schedule); 1 if the model has no optimizer. */
int gg_set_learning_rate(gg_model *model, double lr);
/* Gradient accumulation: gg_train_step adds each call's gradients into the state's sums and updates
 * the parameters at every micro_batches-th call, with the mean of the sums (default 1: every call);
 * 1 if the model has no optimizer or micro_batches < 1. */
int gg_set_grad_accumulation(gg_model *model, int micro_batches);
/* The model's weights (parameters, buffers, constants) as it holds them now: name and bytes (on the
 * model's device: a CUDA model's are device addresses, which a caller may also write). */
int gg_num_weights(void);
int gg_weight(const gg_model *model, int i, const char **name, const void **data, size_t *nbytes);

/* ---- data-parallel training (docs/distributed.md)
 *
 * N processes, one model each (one per GPU), each gg_train_step on its shard of the batch. The
 * backward finishes the gradients in buckets (compile --bucket-mb, default 25) and hands each bucket
 * to the all-reduce the moment it is final, so that communication overlaps the rest of the backward;
 * every rank applies the update to the mean gradient, and the parameters stay identical. Both calls
 * first make every rank's weights rank 0's. gg_backward also all-reduces (gg_gradient gives the mean). */
int gg_num_buckets(void);
/* Bucket b of the last backward's gradients as one 1-D tensor (the bytes between gradients, kept for
 * alignment, are unspecified). */
int gg_bucket(const gg_train_state *state, int b, DLTensor *value);
/* CPU models: sum(ctx, bucket, t) must replace t by its sum over the ranks (torch.distributed's
 * all_reduce does; bucket -1 is the first call's broadcast, where the runtime zeroed the other ranks'
 * values) and return 0; the runtime divides by world_size. Called on the thread of the step. */
typedef int (*gg_allreduce_fn)(void *ctx, int bucket, DLTensor *t);
int gg_set_data_parallel(gg_model *model, int world_size, int rank, gg_allreduce_fn sum, void *ctx, char *err, size_t errlen);
/* CUDA models: NCCL from the CUDA installation (libnccl.so.2, loaded at the first call). Rank 0 makes
 * the 128-byte unique id and gives it to the other ranks (a file, a socket, torch.distributed's
 * store); each rank then joins with it (blocking until all world_size have). Bucket all-reduces run
 * on a stream of their own, captured into the step's CUDA graph with the backward. */
int gg_nccl_unique_id(void *id, char *err, size_t errlen);
int gg_set_data_parallel_nccl(gg_model *model, int world_size, int rank, const void *id, char *err, size_t errlen);

#ifdef __cplusplus
}
#endif
#endif
