"""GPUs in containers: Container Device Interface (CDI) specs for NVIDIA GPUs.

A peer of `nvidia-ctk cdi generate`: discover the GPUs and the driver, write a
CDI spec that Docker (>= 25) and Podman load, list and validate specs, and run
the container hooks the spec refers to.  Modules, one concern each:

* `spec`       - the CDI data model, nvidia-ctk's ordering, minimum cdiVersion, encoding
* `ldcache`    - reading glibc's /etc/ld.so.cache
* `discovery`  - GPUs and driver version (NVML, or /proc, sysfs and nvidia-smi)
* `driverfiles`- the driver's libraries, binaries, firmware and IPC sockets
* `generate`   - assembling and writing a spec
* `validate`   - JSON schema plus the checks of the CDI Go loader
* `registry`   - `cdi list`: specs in /etc/cdi and /var/run/cdi
* `hooks`      - the createContainer hook program
* `service`    - the boot-time systemd unit and udev rule
* `snippets`   - docker / podman / compose snippets
"""
