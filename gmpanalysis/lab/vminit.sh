#!/bin/busybox sh
# /init of the lab's guest (busybox in an initramfs built by kernels.py). It mounts this
# machine's root read-only over 9p as the guest's filesystem, with the guest's own proc,
# sys, dev, tmpfs and cgroup v2 (the unified hierarchy, as on every current node), and the
# run's state directory and bundle directory writable over 9p without caching (cache=none:
# a line the sampler flushed is in the host's file at once, so a killed VM loses nothing
# written). Then it runs the state directory's guest.sh under chroot and powers off.
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
say() { echo "gmp-vm: $*"; }
halt() { sync; poweroff -f; sleep 10; }
for m in $(cat /modules); do insmod "$m" || say "insmod $m failed"; done
p9="trans=virtio,version=9p2000.L,msize=262144"
mount -t 9p -o "$p9,ro,cache=loose" hostroot /host || { say "cannot mount the host's root over 9p"; halt; }
mount -t proc proc /host/proc
mount -t sysfs sysfs /host/sys
mount -t devtmpfs devtmpfs /host/dev
# the host's /tmp stays visible (read-only, like the rest: a checkout or bundle may live
# there); the guest writes its own files to a tmpfs on /run (guest.sh sets HOME and TMPDIR)
mount -t tmpfs tmpfs /host/run
mount -t cgroup2 cgroup2 /host/sys/fs/cgroup || { say "cannot mount cgroup2"; halt; }
# the run's state directory (job, guest.sh, result) at a fixed place in the guest's /run
state=/run/gmp-vm
mkdir -p "/host$state"
mount -t 9p -o "$p9,cache=none" gmpstate "/host$state" || { say "cannot mount the state directory"; halt; }
out=$(cat "/host$state/out_path")
mkdir -p "/host$out"
mount -t 9p -o "$p9,cache=none" gmpout "/host$out" || { say "cannot mount the bundle directory $out"; halt; }
ip link set lo up
chroot /host /bin/sh "$state/guest.sh" || say "the lab in the guest exited with $?"
halt
