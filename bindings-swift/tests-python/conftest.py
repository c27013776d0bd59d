"""Loads the uniffi-generated Python bindings for libsignoff_ffi (the same C ABI the Swift
package calls). test.sh generates them into a temp dir and passes it in SIGNOFF_FFI_PY_DIR."""

import asyncio
import functools
import os
import sys

_dir = os.environ.get("SIGNOFF_FFI_PY_DIR")
if not _dir:
    raise RuntimeError("SIGNOFF_FFI_PY_DIR is not set: run bindings-swift/test.sh")
sys.path.insert(0, _dir)

import signoff_ffi  # noqa: E402

TEST_TIMEOUT_S = 20


def async_test(fn):
    """Runs an async test on a fresh event loop. uniffi needs to know the loop so Rust (tokio
    worker threads) can schedule the Python handler/executor coroutines on it."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        async def main():
            signoff_ffi.uniffi_set_event_loop(asyncio.get_running_loop())
            result = await asyncio.wait_for(fn(*args, **kwargs), TEST_TIMEOUT_S)
            # Rust must release every foreign future (handler/executor call) it started; wait for
            # that before the loop closes (a release after it would hit a closed loop).
            for _ in range(200):
                if len(signoff_ffi._UNIFFI_FOREIGN_FUTURE_HANDLE_MAP) == 0:
                    break
                await asyncio.sleep(0.01)
            assert len(signoff_ffi._UNIFFI_FOREIGN_FUTURE_HANDLE_MAP) == 0, "foreign futures were leaked"
            return result

        return asyncio.run(main())

    return wrapper
