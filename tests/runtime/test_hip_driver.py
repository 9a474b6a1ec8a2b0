"""The HIP launch path against a fake hip-python module: argument marshalling and error mapping (no GPU)."""
from __future__ import annotations

import ctypes
import enum

import pytest

from portattn.errors import DriverError
from portattn.runtime import hip_driver


class hipError_t(enum.IntEnum):  # noqa: N801 - hip-python's spelling
    hipSuccess = 0
    hipErrorInvalidValue = 1
    hipErrorInvalidDevice = 101
    hipErrorInvalidImage = 200
    hipErrorNotFound = 500
    hipErrorLaunchFailure = 719


class FakeHip:
    """Records every call; ``fail[call] = code`` makes that call return ``code``."""

    hipError_t = hipError_t

    def __init__(self, current_device: int = 0) -> None:
        self.current = current_device
        self.calls: list[tuple] = []
        self.fail: dict[str, hipError_t] = {}
        self.launched: dict = {}

    def _rc(self, name: str, *out):
        code = self.fail.get(name, hipError_t.hipSuccess)
        return (code, *(None if code else o for o in out)) if out else (code,)

    def hipGetErrorName(self, err):
        return (hipError_t.hipSuccess, hipError_t(err).name.encode())

    def hipGetDevice(self):
        self.calls.append(("hipGetDevice",))
        return self._rc("hipGetDevice", self.current)

    def hipSetDevice(self, index):
        self.calls.append(("hipSetDevice", index))
        rc = self._rc("hipSetDevice")
        if rc[0] == hipError_t.hipSuccess:
            self.current = index
        return rc

    def hipModuleLoadData(self, image):
        self.calls.append(("hipModuleLoadData", bytes(image), self.current))
        return self._rc("hipModuleLoadData", "module#1")

    def hipModuleGetFunction(self, module, name):
        self.calls.append(("hipModuleGetFunction", module, name, self.current))
        return self._rc("hipModuleGetFunction", ("function", module, name))

    def hipModuleUnload(self, module):
        self.calls.append(("hipModuleUnload", module))
        return self._rc("hipModuleUnload")

    def hipModuleLaunchKernel(self, f, gx, gy, gz, bx, by, bz, smem, stream, kernel_params, extra):
        # Read through the void** now, while the caller's array is alive: entry 0 -> the struct's bytes.
        arg0 = ctypes.c_void_p.from_address(kernel_params).value
        self.launched = dict(f=f, grid=(gx, gy, gz), block=(bx, by, bz), smem=smem, stream=stream, extra=extra,
                             arg0=arg0, device=self.current, arg_bytes=ctypes.string_at(arg0, ctypes.sizeof(Params)))
        self.calls.append(("hipModuleLaunchKernel",))
        return self._rc("hipModuleLaunchKernel")


class Params(ctypes.Structure):
    _fields_ = [("q", ctypes.c_void_p), ("n", ctypes.c_int64), ("heads", ctypes.c_int32),
                ("scale", ctypes.c_float), ("flag", ctypes.c_int32)]


BINARY = b"\x7fELF" + bytes(range(60))


def _loaded(fake: FakeHip, device: int = 0):
    module = hip_driver.load(BINARY, device, hip=fake)
    return module, module.function("pa_kernel")


def test_load_and_function_on_the_requested_device():
    fake = FakeHip(current_device=1)
    module, fn = _loaded(fake, device=0)
    assert ("hipModuleLoadData", BINARY, 0) in fake.calls  # loaded while device 0 was current
    assert ("hipModuleGetFunction", "module#1", b"pa_kernel", 0) in fake.calls
    assert fake.current == 1  # the caller's device is restored
    assert module.handle == "module#1" and fn.handle == ("function", "module#1", b"pa_kernel")
    assert fn.device_index == 0 and fn.name == "pa_kernel"
    module.unload()
    assert ("hipModuleUnload", "module#1") in fake.calls and module.handle is None


def test_launch_marshals_grid_block_smem_stream_and_struct():
    fake = FakeHip()
    _, fn = _loaded(fake)
    params = Params(q=0x1234_5678_9ABC, n=-(2**40), heads=12, scale=0.125, flag=1)
    hip_driver.launch(fn, (7, 3, 2), (256, 1, 1), 40960, params, 0xDEAD_BEEF)
    got = fake.launched
    assert got["f"] == fn.handle
    assert got["grid"] == (7, 3, 2) and got["block"] == (256, 1, 1)
    assert got["smem"] == 40960 and got["stream"] == 0xDEAD_BEEF and got["extra"] is None
    assert got["arg0"] == ctypes.addressof(params)  # kernelParams[0] is the struct's address...
    assert got["arg_bytes"] == bytes(params)  # ...and it holds the struct's bytes
    assert not any(c[0] == "hipSetDevice" for c in fake.calls)  # already on device 0


def test_launch_switches_to_the_function_device_and_back():
    fake = FakeHip(current_device=0)
    _, fn = _loaded(fake, device=2)
    fake.current = 0
    hip_driver.launch(fn, (1, 1, 1), (64, 1, 1), 0, Params(), 0)
    assert fake.launched["device"] == 2 and fake.current == 0
    assert fake.launched["stream"] == 0


@pytest.mark.parametrize(
    "call, code",
    [
        ("hipModuleLoadData", hipError_t.hipErrorInvalidImage),
        ("hipModuleGetFunction", hipError_t.hipErrorNotFound),
        ("hipModuleLaunchKernel", hipError_t.hipErrorLaunchFailure),
        ("hipGetDevice", hipError_t.hipErrorInvalidDevice),
        ("hipSetDevice", hipError_t.hipErrorInvalidDevice),
    ],
)
def test_every_failure_becomes_driver_error(call, code):
    fake = FakeHip(current_device=1)
    fake.fail[call] = code
    with pytest.raises(DriverError) as info:
        _, fn = _loaded(fake, device=0)
        hip_driver.launch(fn, (1, 1, 1), (64, 1, 1), 0, Params(), 0)
    err = info.value
    assert err.backend == "hip" and err.code == code
    assert err.call.startswith(call)
    assert code.name in str(err)


def test_launch_error_names_the_kernel_and_oversized_lds():
    fake = FakeHip()
    _, fn = _loaded(fake)
    fake.fail["hipModuleLaunchKernel"] = hipError_t.hipErrorInvalidValue
    with pytest.raises(DriverError, match=r"pa_kernel.*smem=70000.*65536") as info:
        hip_driver.launch(fn, (1, 1, 1), (64, 1, 1), 70000, Params(), 0)
    assert info.value.call == "hipModuleLaunchKernel"
