//===- profile.cpp - AMPRT_PROFILE's kernel names, AMPRT_CHECK_NUMERICS ---===//

#include "host/profile.h"

#include <cstdlib>
#include <string>

namespace {
thread_local std::string g_impls; // this op's kernel implementations
} // namespace

void amprt::noteKernelImpl(const char *impl) {
  if (!impl || !*impl || g_impls.find(impl) != std::string::npos)
    return;
  if (!g_impls.empty())
    g_impls += ", ";
  g_impls += impl;
}

std::string amprt::takeKernelImpls() {
  std::string s;
  s.swap(g_impls);
  return s;
}

bool amprt::checkNumericsRequested() {
  static const bool on = [] {
    const char *v = std::getenv("AMPRT_CHECK_NUMERICS");
    return v && *v && *v != '0';
  }();
  return on;
}
