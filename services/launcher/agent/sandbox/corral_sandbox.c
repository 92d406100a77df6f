/*
 * corral-sandbox: run one task of someone else's code inside its own sandbox.
 *
 * The node agent (root) starts this program once per task; it does, in order:
 *
 *   helper (root, the agent's namespaces; outside the task's cgroups)
 *     writes its pid file, opens the task's log, makes new pid and IPC namespaces,
 *     forks INIT, writes INIT's pid into the task's cgroups, then lets it go on;
 *     copies everything the task prints into the log (the task never holds the log
 *     file itself, so it cannot reopen, truncate or seek it), waits for INIT and
 *     writes the task's exit status to the exit file.
 *   INIT (pid 1 of the task's pid namespace, in its cgroups)
 *     makes a mount namespace: the root read-only and nosuid, a private /proc, a
 *     private /dev with only the standard nodes and the task's own devices, tmpfs on
 *     /tmp, /var/tmp and /dev/shm (of --shm-mb MiB when given), empty tmpfs over the
 *     hidden paths (Corral's home, the agent's state), the task's storage (--bind: a
 *     host directory at /mnt/NAME, on a private tmpfs over /mnt that holds only those),
 *     the task's working directory bound writable, and (with
 *     --passwd, --group) the agent's account files for the task bound read-only over
 *     /etc/passwd and /etc/group, so that its uid has a name and a home; forks MAIN,
 *     forwards stop signals to every process of the namespace, reaps orphans, and
 *     exits with MAIN's status (the kernel then kills what is left in the namespace).
 *   MAIN (pid 2)
 *     drops every privilege for good: no supplementary groups, the task's gid and
 *     uid, an empty capability bounding set, no ambient capabilities, no_new_privs;
 *     only fds 0, 1 and 2 open; then execs the task's command.
 *
 * A mistake here is a security bug, so it does nothing it does not need to, and
 * stops the task (status 125, a line in the log saying which step failed) when any
 * step fails rather than run it with less isolation than asked for.
 *
 * Exit file: the task's exit code ("3"), or a minus sign and the signal that
 * killed it ("-9"). The helper exits with the code, or 128 + the signal.
 *
 * Join mode (``--join INIT``): run one more command inside a task that is running
 * (an exec into it), as MAIN would be run:
 *
 *   helper (root, the agent's namespaces)
 *     checks that INIT is the task's: pid 1 of its own pid namespace and a member of
 *     the task's cgroups (through a pidfd, so a recycled pid is never joined); writes
 *     its own pid into the task's cgroups; enters INIT's IPC, mount and pid namespaces
 *     (one setns on the pidfd: all or none); forks CHILD, reports CHILD's pid on
 *     --pid-fd, relays stop signals to CHILD's process group, waits for CHILD and
 *     exits with its code (128 + the signal that killed it).
 *   CHILD (a process of the task's pid namespace, in its cgroups and mounts)
 *     a session of its own (the controlling terminal on fd 0 with --tty), then the
 *     same as MAIN: only fds 0, 1 and 2, privileges dropped, the seccomp filter, the
 *     working directory, the task's environment from --env-fd; execs the command.
 *
 * The command's own stdin, stdout and stderr are the helper's (the agent's pty or
 * pipes); a failure before the command runs is said there, and the helper exits 125.
 * The helper and CHILD die with their parent (PR_SET_PDEATHSIG): an exec never
 * outlives the agent that serves it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/audit.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <poll.h>
#include <stddef.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef MOUNT_ATTR_RDONLY
#define MOUNT_ATTR_RDONLY 0x00000001
#define MOUNT_ATTR_NOSUID 0x00000002
#define MOUNT_ATTR_NODEV 0x00000004
#define MOUNT_ATTR_NOEXEC 0x00000008
struct mount_attr { unsigned long long attr_set, attr_clr, propagation, userns_fd; };
#endif
#ifndef AT_RECURSIVE
#define AT_RECURSIVE 0x8000
#endif
#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442
#endif
#ifndef SYS_open_tree
#define SYS_open_tree 428
#define SYS_move_mount 429
#endif
#ifndef OPEN_TREE_CLONE
#define OPEN_TREE_CLONE 1
#define OPEN_TREE_CLOEXEC O_CLOEXEC
#define MOVE_MOUNT_F_EMPTY_PATH 0x00000004
#endif
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif

#define FAILED_TO_START 125
#define MAX_LIST 64

static const char *pid_file, *exit_file, *log_file, *workdir;
static const char *passwd_file, *group_file; /* seen by the task as /etc/passwd, /etc/group */
static const char *cgroups[MAX_LIST], *hidden[MAX_LIST], *devices[MAX_LIST], *writable[MAX_LIST];
static const char *readable[MAX_LIST];
static const char *bind_source[MAX_LIST], *bind_target[MAX_LIST]; /* --bind SRC:DST:ro|rw */
static int bind_read_only[MAX_LIST];
static int n_cgroups, n_hidden, n_devices, n_writable, n_readable, n_binds;
static long shm_mb = -1;       /* the size of the private /dev/shm (-1: tmpfs's default) */
static long uid = -1, gid = -1;
static int nodev; /* no devices controller (cgroup v2): device nodes work only in /dev */
static char **command;
static char **task_env;        /* MAIN's environment, read from --env-fd (never our own) */
static int env_fd = -1;
static int log_fd = -1;
static int err_fd = -1;        /* a failure before the task runs, for the helper to record */
static long join_pid = -1;     /* join mode: the running task's INIT */
static int join_tty;           /* join mode: fd 0 is a terminal, to become CHILD's own */
static int report_fd = -1;     /* join mode: where CHILD's pid is said */
static const char *failing = "could not start the task";
#define MAX_ENV_BYTES (1 << 20)

/* The standard device nodes every task gets in its private /dev (as container runtimes
 * give them): name, major, minor. */
static const struct { const char *name; unsigned major, minor; } standard_devices[] = {
    {"null", 1, 3}, {"zero", 1, 5}, {"full", 1, 7}, {"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0}, {NULL, 0, 0},
};

static void say(const char *fmt, ...) {
    char line[1024];
    va_list args;
    va_start(args, fmt);
    int n = vsnprintf(line, sizeof line - 1, fmt, args);
    va_end(args);
    if (n < 0) return;
    if (n > (int)sizeof line - 2) n = sizeof line - 2;
    line[n++] = '\n';
    /* The log when it is open (the user reads why the task did not start), else stderr. */
    if (write(log_fd >= 0 ? log_fd : 2, line, n) < 0) { /* nothing more can be said */ }
}

static void die(const char *step) {
    int cause = errno;
    say("corral-sandbox: %s: %s: %s", failing, step, strerror(cause));
    if (err_fd >= 0) {
        /* The helper records this line in the exit file, which only root can write: the
         * reason is never taken from the task's own output, which the task controls. */
        char line[512];
        int n = snprintf(line, sizeof line, "%s: %s", step, strerror(cause));
        if (n > 0 && write(err_fd, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1) < 0) {
            /* the helper is gone: nothing more to tell */
        }
    }
    _exit(FAILED_TO_START);
}

static void add(const char **list, int *count, const char *value) {
    if (*count == MAX_LIST) { errno = E2BIG; die("too many paths of one kind"); }
    list[(*count)++] = value;
}

/* A path the helper may mount from or at: absolute, and plain (no empty, "." or ".."
 * part), so it names what it seems to (the agent checks this too). */
static int plain_path(const char *path) {
    if (path[0] != '/' || path[1] == 0) return 0;
    for (const char *part = path + 1; part;) {
        const char *end = strchr(part, '/');
        size_t n = end ? (size_t)(end - part) : strlen(part);
        if (n == 0 || (n == 1 && part[0] == '.') || (n == 2 && part[0] == '.' && part[1] == '.')) return 0;
        part = end ? end + 1 : NULL;
    }
    return 1;
}

/* --bind SRC:DST:ro|rw, split in place: DST one name under /mnt (a task's storage is
 * mounted there and nowhere else), SRC any plain absolute path (it may hold no ':'). */
static void add_bind(char *value) {
    char *mode = strrchr(value, ':');
    if (!mode) { errno = EINVAL; die("--bind SRC:DST:ro|rw"); }
    *mode++ = 0;
    char *target = strrchr(value, ':');
    if (!target) { errno = EINVAL; die("--bind SRC:DST:ro|rw"); }
    *target++ = 0;
    int read_only = strcmp(mode, "ro") == 0;
    if ((!read_only && strcmp(mode, "rw") != 0) || !plain_path(value) || !plain_path(target)
        || strncmp(target, "/mnt/", 5) != 0 || strchr(target + 5, '/')) {
        errno = EINVAL;
        die("--bind SRC:/mnt/NAME:ro|rw (plain absolute paths)");
    }
    if (n_binds == MAX_LIST) { errno = E2BIG; die("too many --bind"); }
    bind_source[n_binds] = value;
    bind_target[n_binds] = target;
    bind_read_only[n_binds++] = read_only;
}

static void parse(int argc, char **argv) {
    int i = 1;
    for (; i < argc; i++) {
        const char *flag = argv[i];
        if (strcmp(flag, "--") == 0) { i++; break; }
        if (strcmp(flag, "--nodev") == 0) { nodev = 1; continue; }
        if (strcmp(flag, "--tty") == 0) { join_tty = 1; continue; }
        if (i + 1 >= argc) { errno = EINVAL; die(flag); }
        const char *value = argv[++i];
        if (strcmp(flag, "--pid-file") == 0) pid_file = value;
        else if (strcmp(flag, "--exit-file") == 0) exit_file = value;
        else if (strcmp(flag, "--log") == 0) log_file = value;
        else if (strcmp(flag, "--workdir") == 0) workdir = value;
        else if (strcmp(flag, "--passwd") == 0) passwd_file = value;
        else if (strcmp(flag, "--group") == 0) group_file = value;
        else if (strcmp(flag, "--uid") == 0) uid = strtol(value, NULL, 10);
        else if (strcmp(flag, "--env-fd") == 0) env_fd = (int)strtol(value, NULL, 10);
        else if (strcmp(flag, "--gid") == 0) gid = strtol(value, NULL, 10);
        else if (strcmp(flag, "--cgroup-procs") == 0) add(cgroups, &n_cgroups, value);
        else if (strcmp(flag, "--hide") == 0) add(hidden, &n_hidden, value);
        else if (strcmp(flag, "--device") == 0) add(devices, &n_devices, value);
        else if (strcmp(flag, "--writable") == 0) add(writable, &n_writable, value);
        else if (strcmp(flag, "--readable") == 0) add(readable, &n_readable, value);
        else if (strcmp(flag, "--bind") == 0) add_bind(argv[i]);
        else if (strcmp(flag, "--shm-mb") == 0) {
            char *end;
            shm_mb = strtol(value, &end, 10);
            if (*end || shm_mb < 1 || shm_mb > 16L * 1024 * 1024) { errno = EINVAL; die("--shm-mb"); }
        }
        else if (strcmp(flag, "--join") == 0) join_pid = strtol(value, NULL, 10);
        else if (strcmp(flag, "--pid-fd") == 0) report_fd = (int)strtol(value, NULL, 10);
        else { errno = EINVAL; die(flag); }
    }
    command = argv + i;
    if (join_pid != -1) {
        /* Nothing of a task's start is accepted here: a join never makes mounts, and a
         * flag that would be ignored is refused rather than silently dropped. */
        failing = "could not run the command in the task";
        if (join_pid <= 1 || !workdir || uid <= 0 || gid <= 0 || n_cgroups == 0 || !command[0]
            || command[0][0] != '/' || pid_file || exit_file || log_file || nodev || n_hidden || n_devices
            || n_writable || n_readable || passwd_file || group_file || n_binds || shm_mb != -1) {
            errno = EINVAL;
            die("usage: corral-sandbox --join PID --uid N --gid N --workdir D --cgroup-procs F... [--env-fd N] "
                "[--pid-fd N] [--tty] -- /ABSOLUTE/COMMAND ARGS...");
        }
        return;
    }
    if (!pid_file || !exit_file || !log_file || !workdir || uid <= 0 || gid <= 0 || !command[0]
        || command[0][0] != '/' || join_tty || report_fd >= 0) {
        errno = EINVAL;
        die("usage: corral-sandbox --pid-file F --exit-file F --log F --workdir D --uid N --gid N [--env-fd N] "
            "[--cgroup-procs F]... [--hide D]... [--device F]... [--writable D]... [--readable D]... [--nodev] "
            "[--passwd F] [--group F] [--bind SRC:/mnt/NAME:ro|rw]... [--shm-mb N] -- /ABSOLUTE/COMMAND ARGS...");
    }
}

static void write_file(const char *path, const char *text, int flags) {
    int fd = open(path, O_WRONLY | O_CLOEXEC | flags, 0600);
    if (fd < 0) die(path);
    ssize_t n = write(fd, text, strlen(text));
    if (n != (ssize_t)strlen(text)) die(path);
    close(fd);
}

/* --- INIT's mount namespace ------------------------------------------------------ */

static void mkdirs(const char *path) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(buf, 0755) < 0 && errno != EEXIST) die(buf);
        *p = '/';
    }
    if (mkdir(buf, 0755) < 0 && errno != EEXIST) die(buf);
}

static void tmpfs(const char *target, const char *options) {
    if (mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, options) < 0) die(target);
}

/* A detached copy of the mount at ``path`` (taken before anything is hidden), to be
 * attached later with ``attach``: a bind that still works once ``path`` is covered.
 * With the mounts inside it (a recursive bind): a GPU host's driver often lies on a
 * mount of its own inside a readable path (/usr/local/nvidia), and a plain bind would
 * cover it with the empty directory beneath. */
static int clone_tree(const char *path) {
    int fd = (int)syscall(SYS_open_tree, AT_FDCWD, path, OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE);
    if (fd < 0) die(path);
    return fd;
}

static void attach(int tree, const char *target, int read_only) {
    mkdirs(target);
    /* The copy has the flags of the read-only root it came from: make it writable (its
     * top only: a mount inside a writable path stays read-only), or read-only to the
     * last mount inside it. */
    struct mount_attr attr = {0};
    attr.attr_set = MOUNT_ATTR_NOSUID | (read_only ? MOUNT_ATTR_RDONLY : 0);
    attr.attr_clr = read_only ? 0 : MOUNT_ATTR_RDONLY;
    int depth = read_only ? AT_RECURSIVE : 0;
    if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH | depth, &attr, sizeof attr) < 0) die(target);
    if (syscall(SYS_move_mount, tree, "", AT_FDCWD, target, MOVE_MOUNT_F_EMPTY_PATH) < 0) die(target);
    close(tree);
}

/* A copy of one regular file (``clone_tree`` of a file), or -1 without one. */
static int clone_file(const char *path) {
    if (!path) return -1;
    int fd = clone_tree(path);
    struct stat st;
    if (fstat(fd, &st) < 0) die(path);
    if (!S_ISREG(st.st_mode)) { errno = EINVAL; die(path); }
    return fd;
}

/* ``tree`` (a file's copy) over the file ``target``, read-only and inert: the task can
 * neither change what it reads there nor run or open a device through it. The target
 * must exist already (the root is read-only: nothing can be made there). */
static void attach_file(int tree, const char *target) {
    if (tree < 0) return;
    struct mount_attr attr = {0};
    attr.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC;
    if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &attr, sizeof attr) < 0) die(target);
    if (syscall(SYS_move_mount, tree, "", AT_FDCWD, target, MOVE_MOUNT_F_EMPTY_PATH) < 0) die(target);
    close(tree);
}

static void make_device(const char *path, mode_t mode, dev_t device) {
    if (mknod(path, S_IFCHR | mode, device) < 0) die(path);
    if (chmod(path, mode) < 0) die(path); /* (mknod obeys the umask) */
}

static int is_under(const char *path, const char *parent) {
    size_t n = strlen(parent);
    return strncmp(path, parent, n) == 0 && (path[n] == '/' || (n > 0 && parent[n - 1] == '/'));
}

/* An empty tmpfs over every hidden path (``under``: only those inside that path). */
static void hide_all(const char *under) {
    for (int i = 0; i < n_hidden; i++) {
        if (under && !is_under(hidden[i], under)) continue;
        if (access(hidden[i], F_OK) < 0) continue; /* nothing there to hide */
        tmpfs(hidden[i], "mode=0755,size=64k");
    }
}

static int in_dev(const char *path) {
    return strncmp(path, "/dev/", 5) == 0 && !strstr(path, "/../");
}

static void make_mounts(void) {
    if (unshare(CLONE_NEWNS) < 0) die("unshare(mount namespace)");
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0) die("making / private");
    struct mount_attr attr = {0};
    attr.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | (nodev ? MOUNT_ATTR_NODEV : 0);
    if (syscall(SYS_mount_setattr, AT_FDCWD, "/", AT_RECURSIVE, &attr, sizeof attr) < 0)
        die("making / read-only (mount_setattr, Linux 5.12+)");

    /* Everything the task may keep is copied first: the mounts below hide the paths. */
    int work_tree = clone_tree(workdir);
    int writable_tree[MAX_LIST], readable_tree[MAX_LIST];
    struct stat device_stat[MAX_LIST];
    for (int i = 0; i < n_writable; i++) writable_tree[i] = clone_tree(writable[i]);
    for (int i = 0; i < n_readable; i++) readable_tree[i] = clone_tree(readable[i]);
    /* A storage's source may lie in a hidden path (an NFS export the agent mounted in
     * its state): copied now, before that is hidden. A source that is not a directory
     * is refused: a file bound at /mnt/NAME is not what a storage promises. */
    int bind_tree[MAX_LIST];
    for (int i = 0; i < n_binds; i++) {
        struct stat st;
        if (stat(bind_source[i], &st) < 0) die(bind_source[i]);
        if (!S_ISDIR(st.st_mode)) { errno = ENOTDIR; die(bind_source[i]); }
        bind_tree[i] = clone_tree(bind_source[i]);
    }
    /* (They live in the agent's state, which is hidden below.) */
    int passwd_tree = clone_file(passwd_file), group_tree = clone_file(group_file);
    /* A device outside /dev stays where it is, seen through the read-only root; the
     * device cgroup (v1) decides whether it opens. One in /dev is made anew in the
     * private /dev, with the same numbers. */
    for (int i = 0; i < n_devices; i++) {
        if (in_dev(devices[i]) && (stat(devices[i], &device_stat[i]) < 0 || !S_ISCHR(device_stat[i].st_mode))) {
            if (errno == 0) errno = ENODEV;
            die(devices[i]);
        }
    }

    if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0) die("/proc");
    hide_all(NULL);
    tmpfs("/tmp", "mode=1777");
    if (access("/var/tmp", F_OK) == 0) tmpfs("/var/tmp", "mode=1777");
    /* With storage, a tmpfs of root's over /mnt: the root is read-only (nothing can be
     * made there), and the task sees at /mnt only the storage it asked for. Before the
     * readable paths, so that one under /mnt comes back on it. */
    if (n_binds && mount("tmpfs", "/mnt", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755,size=64k") < 0)
        die("/mnt (a task with storage needs the host to have a /mnt directory)");
    /* Readable paths come back (read-only) even inside a hidden one (an interpreter in
     * root's home) or under the new /tmp (a checkout there), and whatever hidden path
     * lies inside one of them is hidden again. */
    for (int i = 0; i < n_readable; i++) {
        attach(readable_tree[i], readable[i], 1);
        hide_all(readable[i]);
    }

    /* Device nodes are made, not bound: cheaper, and the task, which may not mknod,
     * cannot add any (the tmpfs is root's, mode 0755). */
    if (mount("tmpfs", "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k") < 0) die("/dev");
    for (int i = 0; standard_devices[i].name; i++) {
        char path[64];
        snprintf(path, sizeof path, "/dev/%s", standard_devices[i].name);
        make_device(path, 0666, makedev(standard_devices[i].major, standard_devices[i].minor));
    }
    for (int i = 0; i < n_devices; i++) {
        if (in_dev(devices[i])) make_device(devices[i], device_stat[i].st_mode & 0777, device_stat[i].st_rdev);
    }
    mkdirs("/dev/shm");
    char shm_options[64] = "mode=1777";
    if (shm_mb > 0) snprintf(shm_options, sizeof shm_options, "mode=1777,size=%ldm", shm_mb);
    tmpfs("/dev/shm", shm_options);
    mkdirs("/dev/pts");
    if (mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=620") < 0)
        die("/dev/pts");
    if (symlink("pts/ptmx", "/dev/ptmx") < 0) die("/dev/ptmx");
    if (symlink("/proc/self/fd", "/dev/fd") < 0) die("/dev/fd");
    if (symlink("/proc/self/fd/0", "/dev/stdin") < 0) die("/dev/stdin");
    if (symlink("/proc/self/fd/1", "/dev/stdout") < 0) die("/dev/stdout");
    if (symlink("/proc/self/fd/2", "/dev/stderr") < 0) die("/dev/stderr");

    for (int i = 0; i < n_writable; i++) attach(writable_tree[i], writable[i], 0);
    /* The task's storage, each source at /mnt/NAME (on the tmpfs made above). */
    for (int i = 0; i < n_binds; i++) attach(bind_tree[i], bind_target[i], bind_read_only[i]);
    attach(work_tree, workdir, 0);
    /* Last, so that no readable or writable path mounted over /etc covers them. */
    attach_file(passwd_tree, "/etc/passwd");
    attach_file(group_tree, "/etc/group");
}

/* --- MAIN: no privilege left ----------------------------------------------------- */

static void drop_privileges(void) {
    if (setgroups(0, NULL) < 0) die("setgroups");
    if (setresgid(gid, gid, gid) < 0) die("setresgid");
    for (int cap = 0; cap <= 63; cap++) {
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL) die("dropping the capability bounding set");
    }
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL) die("clearing ambient capabilities");
    if (setresuid(uid, uid, uid) < 0) die("setresuid");
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) die("no_new_privs");
    /* Refuse to go on if anything of root is left (a kernel that ignored a step). */
    if (getuid() == 0 || geteuid() == 0 || getgid() == 0 || getegid() == 0 || setuid(0) == 0) {
        errno = EPERM;
        die("still privileged after dropping privileges");
    }
}

/* The task's environment: NUL-separated NAME=value pairs from --env-fd (a memfd the
 * agent wrote). The helper itself runs with an empty environment, so nothing a job
 * sets (LD_PRELOAD, GLIBC_TUNABLES...) reaches a process that runs as root. */
static void read_task_env(void) {
    static char *none[] = {NULL};
    task_env = none;
    if (env_fd < 0) return;
    char *buf = malloc(MAX_ENV_BYTES + 1);
    if (!buf) die("reading the task's environment");
    size_t len = 0;
    for (;;) {
        ssize_t n = pread(env_fd, buf + len, MAX_ENV_BYTES - len, (off_t)len);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) die("reading the task's environment");
        if (n == 0) break;
        len += (size_t)n;
        if (len == MAX_ENV_BYTES) { errno = E2BIG; die("reading the task's environment"); }
    }
    close(env_fd);
    buf[len] = 0;
    size_t count = 0;
    for (size_t i = 0; i < len; i++) count += buf[i] == 0;
    char **env = calloc(count + 2, sizeof *env);
    if (!env) die("reading the task's environment");
    size_t k = 0;
    for (size_t i = 0; i < len;) {
        env[k++] = buf + i;
        i += strlen(buf + i) + 1;
    }
    env[k] = NULL;
    task_env = env;
}

/* A seccomp filter for everything the task runs: no kernel keyrings (a uid's keyring
 * outlives its task, and uids are reused), no new user namespaces (unshare, clone with
 * CLONE_NEWUSER; clone3 says ENOSYS so the C library falls back to clone), no bpf,
 * userfaultfd or io_uring (large kernel surfaces a training job does not need). Calls
 * of another architecture's ABI (32-bit, x32) are refused whole: their numbers differ. */
#if defined(__x86_64__)
#define NATIVE_ARCH AUDIT_ARCH_X86_64
#define FOREIGN_SYSCALL_BIT 0x40000000 /* x32 */
#elif defined(__aarch64__)
#define NATIVE_ARCH AUDIT_ARCH_AARCH64
#define FOREIGN_SYSCALL_BIT 0
#endif

#define DENY(nr, error) \
    BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (error))

static void confine_syscalls(void) {
#ifdef NATIVE_ARCH
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NATIVE_ARCH, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
#if FOREIGN_SYSCALL_BIT
        BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, FOREIGN_SYSCALL_BIT, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
#endif
        DENY(__NR_add_key, EPERM),
        DENY(__NR_request_key, EPERM),
        DENY(__NR_keyctl, EPERM),
        DENY(__NR_unshare, EPERM),
        DENY(__NR_bpf, EPERM),
        DENY(__NR_userfaultfd, EPERM),
        DENY(__NR_io_uring_setup, EPERM),
        DENY(__NR_io_uring_enter, EPERM),
        DENY(__NR_io_uring_register, EPERM),
        DENY(__NR_clone3, ENOSYS),
        /* clone: refused only when its flags (first argument) ask for a user namespace */
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone, 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[0])),
        BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, CLONE_NEWUSER, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog program = {(unsigned short)(sizeof filter / sizeof filter[0]), filter};
    if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) < 0) die("installing the seccomp filter");
#endif
}

static void run_main(int out_fd) {
    int null_fd = open("/dev/null", O_RDONLY);
    if (null_fd < 0) die("/dev/null");
    if (dup2(null_fd, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(out_fd, 2) < 0) die("dup2");
    /* Only 0, 1, 2 reach the task; the error pipe is close-on-exec, kept until then. */
    if ((err_fd > 3 && syscall(SYS_close_range, 3, err_fd - 1, 0) < 0)
        || syscall(SYS_close_range, err_fd + 1, ~0U, 0) < 0)
        die("closing inherited file descriptors");
    log_fd = 2; /* from here on a failure is said on the task's own output too */
    for (int sig = 1; sig < NSIG; sig++) signal(sig, SIG_DFL);
    drop_privileges();
    confine_syscalls();
    if (chdir(workdir) < 0) die(workdir);
    umask(022);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL); /* a stop sent meanwhile arrives now */
    execve(command[0], command, task_env);
    die(command[0]);
}

/* --- INIT ------------------------------------------------------------------------ */

static void forward(int sig) {
    /* From pid 1 of a namespace, -1 means every other process in it. */
    kill(-1, sig);
}

static const int stop_signals[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, 0};

static void stop_signal_set(sigset_t *set) {
    sigemptyset(set);
    for (int i = 0; stop_signals[i]; i++) sigaddset(set, stop_signals[i]);
}

static void run_init(int out_fd, int go_fd, int status_fd) {
    /* The stop signals stay blocked (as the helper blocked them) until MAIN exists: one
     * sent while the task starts waits, then reaches every process of the task. */
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* the helper gone, nothing records the end: go too */
    char go;
    /* The helper writes our pid into the task's cgroups, then says go. */
    if (read(go_fd, &go, 1) != 1) _exit(FAILED_TO_START);
    close(go_fd);
    read_task_env();
    make_mounts();
    pid_t main_pid = fork();
    if (main_pid < 0) die("fork");
    if (main_pid == 0) {
        close(status_fd);
        run_main(out_fd);
    }
    close(out_fd);
    close(err_fd); /* MAIN holds its own copy until it execs the task */
    err_fd = -1;
    close(log_fd); /* the task's output reaches the log through the helper */
    log_fd = -1;
    struct sigaction action = {0};
    action.sa_handler = forward;
    for (int i = 0; stop_signals[i]; i++) sigaction(stop_signals[i], &action, NULL);
    sigset_t stops;
    stop_signal_set(&stops);
    sigprocmask(SIG_UNBLOCK, &stops, NULL);
    for (;;) {
        int status;
        pid_t pid = waitpid(-1, &status, 0);
        if (pid < 0) {
            if (errno == EINTR) continue;
            _exit(FAILED_TO_START);
        }
        if (pid == main_pid) {
            if (write(status_fd, &status, sizeof status) < 0) { /* helper gone: nothing to tell */ }
            _exit(0);
        }
    }
}

/* --- join mode ------------------------------------------------------------------ */

/* Whether /proc/PID/status says PID is pid 1 of its innermost pid namespace (its
 * NSpid line has more than one number, the last being 1): a task's INIT. */
static int is_namespace_init(long pid) {
    char path[64], line[512];
    snprintf(path, sizeof path, "/proc/%ld/status", pid);
    FILE *status = fopen(path, "re");
    if (!status) return 0;
    int found = 0;
    while (fgets(line, sizeof line, status)) {
        if (strncmp(line, "NSpid:", 6) != 0) continue;
        int count = 0;
        long last = 0;
        for (char *field = strtok(line + 6, " \t\n"); field; field = strtok(NULL, " \t\n")) {
            last = strtol(field, NULL, 10);
            count++;
        }
        found = count > 1 && last == 1;
        break;
    }
    fclose(status);
    return found;
}

/* Whether the cgroup's procs file lists PID. */
static int in_cgroup(const char *procs, long pid) {
    FILE *list = fopen(procs, "re");
    if (!list) die(procs);
    long member;
    int found = 0;
    while (!found && fscanf(list, "%ld", &member) == 1) found = member == pid;
    fclose(list);
    return found;
}

static volatile pid_t child_pid; /* read by the signal handler */

static void relay_to_child(int sig) {
    /* CHILD leads its own process group (its session): what it started goes with it. */
    if (child_pid > 0) kill(-child_pid, sig);
}

static void run_child(void) {
    if (setsid() < 0) die("setsid");
    if (join_tty && ioctl(0, TIOCSCTTY, 0) < 0) die("taking the terminal (TIOCSCTTY)");
    if (syscall(SYS_close_range, 3, ~0U, 0) < 0) die("closing inherited file descriptors");
    for (int sig = 1; sig < NSIG; sig++) signal(sig, SIG_DFL);
    drop_privileges();
    /* After the uid changed (which clears it): the helper gone, CHILD goes too. The
     * helper is outside the task's pid namespace, so while it lives getppid() says 0;
     * had it died before the prctl, CHILD was given to the task's INIT: go now. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0) die("PR_SET_PDEATHSIG");
    if (getppid() != 0) _exit(FAILED_TO_START);
    confine_syscalls();
    if (chdir(workdir) < 0) die(workdir);
    umask(022);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    execve(command[0], command, task_env);
    die(command[0]);
}

static int run_joined(void) {
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0) die("PR_SET_PDEATHSIG");
    read_task_env();
    /* The pidfd first, every check after: if the checks pass and the process is still
     * alive, the pidfd is the process they were made on (its pid cannot have been
     * reused while it lives), and setns on the pidfd joins exactly that one. */
    int pidfd = (int)syscall(SYS_pidfd_open, (pid_t)join_pid, 0);
    if (pidfd < 0) die("the task's init process (pidfd_open)");
    if (!is_namespace_init(join_pid)) {
        errno = ESRCH;
        die("the process to join is not a task's init (pid 1 of its own pid namespace)");
    }
    for (int i = 0; i < n_cgroups; i++) {
        if (!in_cgroup(cgroups[i], join_pid)) {
            errno = ESRCH;
            die("the process to join is not in the task's cgroup");
        }
    }
    if (syscall(SYS_pidfd_send_signal, pidfd, 0, NULL, 0) < 0) die("the task's init process");

    char text[32];
    snprintf(text, sizeof text, "%d", getpid());
    for (int i = 0; i < n_cgroups; i++) write_file(cgroups[i], text, 0);
    if (setns(pidfd, CLONE_NEWIPC | CLONE_NEWNS | CLONE_NEWPID) < 0)
        die("entering the task's namespaces (setns on a pidfd, Linux 5.8+)");
    close(pidfd);

    struct sigaction action = {0};
    action.sa_handler = relay_to_child;
    for (int i = 0; stop_signals[i]; i++) sigaction(stop_signals[i], &action, NULL);
    child_pid = fork();
    if (child_pid < 0) die("fork");
    if (child_pid == 0) run_child();
    if (report_fd >= 0) {
        snprintf(text, sizeof text, "%d\n", child_pid);
        if (write(report_fd, text, strlen(text)) < 0) { /* the agent finds it by its session */ }
        close(report_fd);
    }
    sigset_t stops;
    stop_signal_set(&stops);
    sigprocmask(SIG_UNBLOCK, &stops, NULL); /* child_pid is known: stops are relayed now */
    /* Wait without reaping (CHILD's pid, and so its process group's id, cannot be
     * reused while it is a zombie), stop relaying, then reap: a stop that comes late is
     * never sent, as root, to a process group that has taken the id since. */
    siginfo_t info;
    while (waitid(P_PID, (id_t)child_pid, &info, WEXITED | WNOWAIT) < 0) {
        if (errno != EINTR) die("waitid");
    }
    sigprocmask(SIG_BLOCK, &stops, NULL);
    pid_t reaped = child_pid;
    child_pid = 0;
    int status;
    while (waitpid(reaped, &status, 0) < 0) {
        if (errno != EINTR) die("waitpid");
    }
    return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

/* --- the helper ------------------------------------------------------------------ */

static pid_t init_pid;

static void relay(int sig) {
    if (init_pid > 0) kill(init_pid, sig);
}

static void write_all(const char *buf, ssize_t n) {
    for (ssize_t done = 0; done < n;) {
        ssize_t w = write(log_fd, buf + done, n - done);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return; /* a full disk loses output, never the task */
        done += w;
    }
}

/* Copy the task's output into its log until INIT has exited. Not until the pipe's end
 * of file: a task can pass its stdout to a process outside its sandbox (over a Unix
 * socket), and that process would then decide when the task ends. Once INIT is gone
 * (and the kernel has killed what was left in the task's pid namespace), what is
 * already in the pipe is read, and no more. */
static void copy_output(int out_fd, pid_t init) {
    char buf[65536];
    int pidfd = (int)syscall(SYS_pidfd_open, init, 0); /* Linux 5.3+; else look every 100 ms */
    struct pollfd fds[2] = {{out_fd, POLLIN, 0}, {pidfd, POLLIN, 0}};
    int open_out = 1;
    for (;;) {
        fds[0].fd = open_out ? out_fd : -1; /* (poll skips a negative fd) */
        if (poll(fds, 2, pidfd >= 0 ? -1 : 100) < 0 && errno != EINTR) break;
        if (open_out && fds[0].revents) {
            ssize_t n = read(out_fd, buf, sizeof buf);
            if (n > 0) {
                write_all(buf, n);
                continue;
            }
            if (n == 0 || errno != EINTR) open_out = 0; /* end of file: all let go of it */
        }
        siginfo_t info = {0};
        int exited = pidfd >= 0 ? fds[1].revents != 0
                                : waitid(P_PID, (id_t)init, &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid;
        if (exited) break;
    }
    if (open_out) {
        fcntl(out_fd, F_SETFL, fcntl(out_fd, F_GETFL) | O_NONBLOCK);
        for (int rounds = 0; rounds < 16; rounds++) { /* what is in the pipe: at most 1 MiB */
            ssize_t n = read(out_fd, buf, sizeof buf);
            if (n <= 0) break;
            write_all(buf, n);
        }
    }
    if (pidfd >= 0) close(pidfd);
}

int main(int argc, char **argv) {
    /* A stop sent from now until INIT can pass it on waits (blocked), rather than being
     * lost or killing the helper before it has recorded anything. */
    sigset_t stops;
    stop_signal_set(&stops);
    sigprocmask(SIG_BLOCK, &stops, NULL);
    parse(argc, argv);
    if (join_pid != -1) return run_joined();
    char text[600];
    snprintf(text, sizeof text, "%d\n", getpid());
    write_file(pid_file, text, O_CREAT | O_TRUNC);
    unlink(exit_file);
    log_fd = open(log_file, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
    if (log_fd < 0) die(log_file);

    int out[2], go[2], status[2], err[2];
    if (pipe2(out, O_CLOEXEC) < 0 || pipe2(go, O_CLOEXEC) < 0 || pipe2(status, O_CLOEXEC) < 0
        || pipe2(err, O_CLOEXEC) < 0)
        die("pipe");
    if (unshare(CLONE_NEWPID | CLONE_NEWIPC) < 0) die("unshare(pid and IPC namespaces)");

    struct sigaction action = {0};
    action.sa_handler = relay;
    for (int i = 0; stop_signals[i]; i++) sigaction(stop_signals[i], &action, NULL);

    init_pid = fork();
    if (init_pid < 0) die("fork");
    if (init_pid == 0) {
        close(out[0]);
        close(go[1]);
        close(status[0]);
        close(err[0]);
        err_fd = err[1];
        run_init(out[1], go[0], status[1]);
    }
    close(out[1]);
    close(go[0]);
    close(status[1]);
    close(err[1]);
    if (env_fd >= 0) close(env_fd);
    sigprocmask(SIG_UNBLOCK, &stops, NULL); /* init_pid is known: stops are relayed now */
    snprintf(text, sizeof text, "%d", init_pid);
    for (int i = 0; i < n_cgroups; i++) {
        int fd = open(cgroups[i], O_WRONLY | O_CLOEXEC);
        if (fd < 0 || write(fd, text, strlen(text)) < 0) {
            int cause = errno;
            say("corral-sandbox: could not start the task: joining %s: %s", cgroups[i], strerror(cause));
            kill(init_pid, SIGKILL);
            waitpid(init_pid, NULL, 0);
            snprintf(text, sizeof text, "125\njoining %s: %s\n", cgroups[i], strerror(cause));
            write_file(exit_file, text, O_CREAT | O_TRUNC);
            return FAILED_TO_START;
        }
        close(fd);
    }
    if (write(go[1], "g", 1) != 1) die("starting the task");
    close(go[1]);

    copy_output(out[0], init_pid);
    int init_status, task_status;
    while (waitpid(init_pid, &init_status, 0) < 0) {
        if (errno != EINTR) die("waitpid");
    }
    ssize_t got = read(status[0], &task_status, sizeof task_status);
    /* No status from INIT: it was killed itself (the cgroup killed, or failed to start). */
    int final = got == sizeof task_status ? task_status : init_status;
    char failure[512] = "";
    if (!WIFSIGNALED(final) && WEXITSTATUS(final) == FAILED_TO_START) {
        ssize_t n = read(err[0], failure, sizeof failure - 1); /* INIT's or MAIN's step, if one failed */
        failure[n > 0 ? n : 0] = 0;
    }
    int code;
    if (WIFSIGNALED(final)) {
        snprintf(text, sizeof text, "-%d\n", WTERMSIG(final));
        code = 128 + WTERMSIG(final);
    } else {
        code = WEXITSTATUS(final);
        snprintf(text, sizeof text, failure[0] ? "%d\n%s\n" : "%d\n", code, failure);
    }
    write_file(exit_file, text, O_CREAT | O_TRUNC);
    return code;
}
