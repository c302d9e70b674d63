// FunctionRef: a non-owning reference to a callable, for a callback that
// runs before the call taking it returns. std::function copies its target
// and allocates when the captures exceed its small buffer (16 bytes here):
// a lambda capturing three references cost a malloc and a free on every
// namespace call that passed one. The referenced callable must outlive
// every call through the reference (a temporary lambda argument does: it
// lives to the end of the full expression).
#pragma once

#include <memory>
#include <type_traits>
#include <utility>

namespace upfs {

template <typename Signature>
class FunctionRef;

template <typename R, typename... Args>
class FunctionRef<R(Args...)> {
 public:
  FunctionRef() = default;
  template <typename F, typename = std::enable_if_t<!std::is_same_v<std::remove_cvref_t<F>, FunctionRef> &&
                                                    std::is_invocable_r_v<R, F&, Args...>>>
  FunctionRef(F&& f)  // NOLINT: implicit, as std::function's
      : target_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
        call_([](void* t, Args... args) -> R {
          return (*static_cast<std::remove_reference_t<F>*>(t))(std::forward<Args>(args)...);
        }) {}

  R operator()(Args... args) const { return call_(target_, std::forward<Args>(args)...); }
  explicit operator bool() const { return call_ != nullptr; }

 private:
  void* target_ = nullptr;
  R (*call_)(void*, Args...) = nullptr;
};

}  // namespace upfs
