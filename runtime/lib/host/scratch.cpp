//===- scratch.cpp - per-thread scratch the tuner gives back --------------===//

#include "host/scratch.h"

#include <algorithm>
#include <utility>

namespace amprt {

namespace {
// Constructed by a thread's first ScratchVec before that one's constructor
// ends: destroyed after it, and after every later one, at thread exit.
thread_local std::vector<std::pair<void *, void (*)(void *)>> registry;
} // namespace

void registerScratch(void *owner, void (*release)(void *)) {
  registry.emplace_back(owner, release);
}

void unregisterScratch(void *owner) {
  registry.erase(std::remove_if(registry.begin(), registry.end(),
                                [&](const auto &e) { return e.first == owner; }),
                 registry.end());
}

void releaseScratch() {
  for (auto &[owner, release] : registry)
    release(owner);
}

} // namespace amprt
