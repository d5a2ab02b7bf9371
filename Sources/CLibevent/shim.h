// The parts of libevent that PortLoop's C layer uses; the module exists to carry the link flags.
#include <event2/event.h>
#include <event2/thread.h>
