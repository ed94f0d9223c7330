# BASH_ENV of each command's bash in a jail whose lease has a cgroup (see exec_server.py): it
# runs before the command, joins the cgroups whose cgroup.procs the server holds open on
# fds 7-9, closes them and leaves nothing of itself in the command's environment.
for fd in 7 8 9; do
    [ -e "/dev/fd/$fd" ] || continue
    eval "echo 0 >&$fd" || exit 125  # "0" is the writing process itself
    eval "exec $fd>&-"
done
unset fd BASH_ENV
