// Clang's thread-safety annotations (-Wthread-safety), as macros that are no-ops elsewhere.
//
// GUARDED_BY(mu) on a field: read or written only with `mu` held. REQUIRES(mu) on a function:
// its caller holds `mu`. EXCLUDES(mu): its caller must not (it takes `mu` itself).
// ACQUIRE/RELEASE: the function takes or lets go of the capability. ACQUIRED_BEFORE/AFTER
// write down the lock order. packaging/thread_safety.sh builds the store and fs libraries with
// clang and turns every finding into an error.
#pragma once

#if defined(__clang__)
#define GPUCACHE_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define GPUCACHE_THREAD_ANNOTATION(x)
#endif

#define CAPABILITY(x) GPUCACHE_THREAD_ANNOTATION(capability(x))
#define SCOPED_CAPABILITY GPUCACHE_THREAD_ANNOTATION(scoped_lockable)
#define GUARDED_BY(x) GPUCACHE_THREAD_ANNOTATION(guarded_by(x))
#define PT_GUARDED_BY(x) GPUCACHE_THREAD_ANNOTATION(pt_guarded_by(x))
#define ACQUIRED_BEFORE(...) GPUCACHE_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))
#define ACQUIRED_AFTER(...) GPUCACHE_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
#define REQUIRES(...) GPUCACHE_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define ACQUIRE(...) GPUCACHE_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define RELEASE(...) GPUCACHE_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define ACQUIRE_SHARED(...) GPUCACHE_THREAD_ANNOTATION(acquire_shared_capability(__VA_ARGS__))
#define RELEASE_SHARED(...) GPUCACHE_THREAD_ANNOTATION(release_shared_capability(__VA_ARGS__))
#define RELEASE_GENERIC(...) GPUCACHE_THREAD_ANNOTATION(release_generic_capability(__VA_ARGS__))
#define REQUIRES_SHARED(...) GPUCACHE_THREAD_ANNOTATION(requires_shared_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) GPUCACHE_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define EXCLUDES(...) GPUCACHE_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define ASSERT_CAPABILITY(x) GPUCACHE_THREAD_ANNOTATION(assert_capability(x))
#define RETURN_CAPABILITY(x) GPUCACHE_THREAD_ANNOTATION(lock_returned(x))
#define NO_THREAD_SAFETY_ANALYSIS GPUCACHE_THREAD_ANNOTATION(no_thread_safety_analysis)
