// ThreadHeld<Holder, &Holder::member>(): a per-thread value that a Holder
// takes when a thread first asks (its constructor) and gives back when the
// thread ends (its destructor): a reader slot, a thread index, a guard
// record. Every call of the C API reads such values.
//
// In a shared library every thread_local read is a call to
// __tls_get_addr, and one with a constructor costs two (its guard
// variable's, then its own). The value is therefore cached in a
// constant-initialized, trivially destructible thread_local (no guard: one
// call), and the Holder is made once per thread by a cold function.
#pragma once

#include <optional>
#include <type_traits>
#include <utility>

namespace upfs {

namespace thread_held_internal {

template <typename Holder, auto kMember>
[[gnu::noinline, gnu::cold]] auto Take() {
  thread_local Holder h;
  return h.*kMember;
}

}  // namespace thread_held_internal

template <typename Holder, auto kMember>
inline auto ThreadHeld() {
  using T = std::remove_cvref_t<decltype(std::declval<Holder&>().*kMember)>;
  static_assert(std::is_trivially_destructible_v<T>);
  thread_local std::optional<T> mine;
  // The hot path returns on its own: after a merge with the slow one GCC
  // asked __tls_get_addr for the address a second time.
  if (mine) [[likely]]
    return *mine;
  mine = thread_held_internal::Take<Holder, kMember>();
  return *mine;
}

}  // namespace upfs
