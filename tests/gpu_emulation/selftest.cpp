// Guards the emulator itself: warp operations give CUDA's answers, and what CUDA would not run
// is refused.   selftest MODE   (MODE: ok | divergent | exited | sync | shared | bigblock)
// `ok` exits 0 when every check holds (1 naming the failed one); the others must be refused
// (exit 3).
#include "cuda_emulator.hpp"

double acc_shared[emu::SHARED_LIMIT_BYTES / 8 + emu::CANARY_DOUBLES];

namespace {

int failures = 0;
void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "selftest: %s\n", what);
    ++failures;
  }
}

}  // namespace

#define FULL 0xffffffffu

// Per warp: a sum by shfl_down, an inclusive scan by shfl_up, a butterfly max by shfl_xor, a
// ballot of odd lanes, a broadcast from lane 5; then a block sum through shared memory.
__global__ void warp_ops(double* out) {
  extern __shared__ double acc_shared[];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  double v = lane + 1;
  for (int d = 16; d > 0; d /= 2) v += __shfl_down_sync(FULL, v, d);
  double scan = lane + 1;
  for (int d = 1; d < 32; d *= 2) {
    double left = __shfl_up_sync(FULL, scan, d);
    if (lane >= d) scan += left;
  }
  int best = (lane * 7) % 32;
  for (int d = 16; d > 0; d /= 2) best = max(best, __shfl_xor_sync(FULL, best, d));
  unsigned odd = __ballot_sync(FULL, lane % 2 == 1);
  int five = __shfl_sync(FULL, lane * 10, 5);
  if (threadIdx.x == 0) acc_shared[0] = 0.0;
  __syncthreads();
  atomicAdd(&acc_shared[0], 1.0);
  __syncthreads();
  if (lane == 0) {
    out[warp * 6 + 0] = v;
    out[warp * 6 + 1] = __activemask() == FULL ? 1.0 : 0.0;
    out[warp * 6 + 2] = best;
    out[warp * 6 + 3] = odd == 0xaaaaaaaau ? 1.0 : 0.0;
    out[warp * 6 + 4] = five;
    out[warp * 6 + 5] = acc_shared[0];
  }
  if (lane == 31) out[64 + warp] = scan;
}

__global__ void divergent(double* out) {
  const int lane = threadIdx.x % 32;
  double v = lane;
  if (lane < 16) v = __shfl_sync(FULL, v, 0);  // half the warp at a shuffle
  else v = __shfl_down_sync(FULL, v, 1);       // the other half at another
  out[lane] = v;
}

__global__ void exited(double* out) {
  const int lane = threadIdx.x % 32;
  if (lane == 3) return;  // leaves the warp early
  out[lane] = __shfl_sync(FULL, double(lane), 0);
}

__global__ void sync_divergent(double* out) {
  if (threadIdx.x < 32) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 1.0;
}

__global__ void shared_overflow(double*) {
  extern __shared__ double acc_shared[];
  acc_shared[threadIdx.x] = 1.0;  // 64 threads, room for 32
}

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "ok";
  std::vector<double> out(128, -1.0);
  emu::LaunchConfig c;
  c.grid = emu::Dim3{1, 1, 1};
  c.block = emu::Dim3{64, 1, 1};
  if (mode == "ok") {
    c.shared_bytes = 8;
    for (int schedule = 0; schedule < 2; ++schedule) {
      c.schedule = schedule ? emu::Schedule::RandomWarps : emu::Schedule::RoundRobin;
      c.seed = 7;
      std::fill(out.begin(), out.end(), -1.0);
      emu::launch(c, acc_shared, [&] { warp_ops(out.data()); });
      for (int w = 0; w < 2; ++w) {
        check(out[w * 6 + 0] == 528.0, "warp sum by __shfl_down_sync");
        check(out[w * 6 + 1] == 1.0, "__activemask of a full warp");
        check(out[w * 6 + 2] == 31.0, "max by __shfl_xor_sync");
        check(out[w * 6 + 3] == 1.0, "__ballot_sync of odd lanes");
        check(out[w * 6 + 4] == 50.0, "broadcast by __shfl_sync");
        check(out[w * 6 + 5] == 64.0, "block sum in shared memory across __syncthreads");
        check(out[64 + w] == 528.0, "inclusive scan by __shfl_up_sync");
      }
    }
    if (failures == 0) std::printf("ok\n");
    return failures == 0 ? 0 : 1;
  }
  if (mode == "divergent") emu::launch(c, acc_shared, [&] { divergent(out.data()); });
  if (mode == "exited") emu::launch(c, acc_shared, [&] { exited(out.data()); });
  if (mode == "sync") emu::launch(c, acc_shared, [&] { sync_divergent(out.data()); });
  if (mode == "shared") {
    c.shared_bytes = 32 * 8;
    emu::launch(c, acc_shared, [&] { shared_overflow(out.data()); });
  }
  if (mode == "bigblock") {
    c.block = emu::Dim3{2048, 1, 1};
    emu::launch(c, acc_shared, [&] { exited(out.data()); });
  }
  std::fprintf(stderr, "selftest: %s was not refused\n", mode.c_str());
  return 1;
}
