// pt2cached native-protocol benchmark, side by side with the physical limit
// of this machine: a raw Unix-socket ping-pong (blocking, thread per client)
// moving the same number of bytes per request and reply.
//
//   build/tests/bench/native_bench [--daemon PATH] [--seconds S] [--rows all|get-hot]
//                                  [--set SECTION.KEY=VALUE]...
//
// `--set` is passed on to pt2cached (e.g. --set disk.write_mode=sync).
// `--rows get-hot` runs only the GET 1 KiB hot rows (tests/bench/histogram-overhead).
//
// Prints, for each workload, ops/s, p50 and p99 (client-observed), for the
// GET 1 KiB hot rows the daemon's CPU time per GET, plus the daemon's time
// from exec to ready and its idle RSS.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <signal.h>
#include <string>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "client/client.hpp"

namespace {

using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

struct Result {
    double ops_per_s = 0;
    double p50_us = 0;
    double p99_us = 0;
    double mb_per_s = 0;
    std::size_t ops = 0;
};

// Runs `op` on `clients` threads for `seconds`, collecting latencies.
Result measure(int clients, double seconds, std::size_t bytes_per_op,
               const std::function<std::function<void()>(int)>& make_op) {
    std::vector<std::vector<float>> latencies(clients);
    std::vector<std::thread> threads;
    std::atomic<bool> go{false};
    std::atomic<int> ready{0};
    const auto duration = std::chrono::duration<double>(seconds);
    for (int i = 0; i < clients; ++i) {
        threads.emplace_back([&, i] {
            auto op = make_op(i);
            op(); // warm up the connection
            ready++;
            while (!go) {
                std::this_thread::yield();
            }
            const auto end = Clock::now() + duration;
            auto& mine = latencies[i];
            mine.reserve(1 << 20);
            for (auto now = Clock::now(); now < end;) {
                op();
                const auto after = Clock::now();
                mine.push_back(std::chrono::duration<float, std::micro>(after - now).count());
                now = after;
            }
        });
    }
    while (ready < clients) {
        std::this_thread::yield();
    }
    go = true;
    for (auto& t : threads) {
        t.join();
    }
    std::vector<float> all;
    for (auto& l : latencies) {
        all.insert(all.end(), l.begin(), l.end());
    }
    std::sort(all.begin(), all.end());
    Result r;
    if (all.empty()) {
        return r;
    }
    r.ops = all.size();
    r.ops_per_s = all.size() / seconds;
    r.p50_us = all[all.size() / 2];
    r.p99_us = all[std::min(all.size() - 1, all.size() * 99 / 100)];
    r.mb_per_s = r.ops_per_s * bytes_per_op / 1e6;
    return r;
}

int connect_unix(const std::string& path) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path.c_str(), sizeof address.sun_path - 1);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
        std::perror("connect");
        std::exit(1);
    }
    return fd;
}

bool read_all(int fd, void* data, std::size_t n) {
    auto* p = static_cast<char*>(data);
    while (n > 0) {
        const auto got = ::read(fd, p, n);
        if (got <= 0) {
            return false;
        }
        p += got;
        n -= got;
    }
    return true;
}

bool write_all(int fd, const void* data, std::size_t n) {
    const auto* p = static_cast<const char*>(data);
    while (n > 0) {
        const auto put = ::send(fd, p, n, MSG_NOSIGNAL);
        if (put <= 0) {
            return false;
        }
        p += put;
        n -= put;
    }
    return true;
}

// The raw anchor: a thread per connection reads `request` bytes and answers
// `reply` bytes, nothing else. Requests and replies are sized like the
// native protocol's (12-byte header + body).
class PingPongServer {
public:
    PingPongServer(std::string path, std::size_t request, std::size_t reply)
        : m_path(std::move(path))
        , m_request(request)
        , m_reply(reply) {
        ::unlink(m_path.c_str());
        m_listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        sockaddr_un address{};
        address.sun_family = AF_UNIX;
        std::strncpy(address.sun_path, m_path.c_str(), sizeof address.sun_path - 1);
        if (::bind(m_listener, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
            ::listen(m_listener, 128) != 0) {
            std::perror("ping-pong bind");
            std::exit(1);
        }
        m_acceptor = std::thread([this] {
            for (;;) {
                const int fd = ::accept(m_listener, nullptr, nullptr);
                if (fd < 0) {
                    return;
                }
                m_workers.emplace_back([this, fd] {
                    std::vector<char> in(m_request), out(m_reply, 'x');
                    while (read_all(fd, in.data(), in.size()) &&
                           write_all(fd, out.data(), out.size())) {
                    }
                    ::close(fd);
                });
            }
        });
    }
    ~PingPongServer() {
        ::shutdown(m_listener, SHUT_RDWR);
        ::close(m_listener);
        m_acceptor.join();
        for (auto& w : m_workers) {
            w.join();
        }
        ::unlink(m_path.c_str());
    }

    // An op for one client: send request bytes, read reply bytes.
    std::function<void()> client_op() const {
        // Closed with the last copy of the op, so the server thread sees EOF.
        auto fd = std::shared_ptr<int>(new int(connect_unix(m_path)), [](int* p) {
            ::close(*p);
            delete p;
        });
        auto in = std::make_shared<std::vector<char>>(m_reply);
        auto out = std::make_shared<std::vector<char>>(m_request, 'r');
        return [fd, in, out] {
            write_all(*fd, out->data(), out->size());
            read_all(*fd, in->data(), in->size());
        };
    }

private:
    std::string m_path;
    std::size_t m_request, m_reply;
    int m_listener = -1;
    std::thread m_acceptor;
    std::vector<std::thread> m_workers;
};

long rss_kib(pid_t pid) {
    std::ifstream status("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(status, line)) {
        if (line.rfind("VmRSS:", 0) == 0) {
            return std::stol(line.substr(6));
        }
    }
    return -1;
}

// CPU time all of `pid`'s threads have used, in ns (the first field of each
// thread's schedstat). Less sensitive to other load on the machine than
// throughput is: what a request costs the daemon.
std::uint64_t cpu_ns(pid_t pid) {
    std::uint64_t total = 0;
    std::error_code error;
    for (const auto& task :
         fs::directory_iterator("/proc/" + std::to_string(pid) + "/task", error)) {
        std::ifstream schedstat(task.path() / "schedstat");
        std::uint64_t ns = 0;
        if (schedstat >> ns) {
            total += ns;
        }
    }
    return total;
}

void row(const char* name, const Result& ours, const Result& raw, bool throughput = false) {
    if (throughput) {
        std::printf("%-26s %10.0f MB/s %8.0f %8.0f | %10.0f MB/s %8.0f %8.0f | %5.2f\n", name,
                    ours.mb_per_s, ours.p50_us, ours.p99_us, raw.mb_per_s, raw.p50_us, raw.p99_us,
                    ours.mb_per_s / raw.mb_per_s);
    } else {
        std::printf("%-26s %10.0f ops/s %7.1f %8.1f | %10.0f ops/s %7.1f %8.1f | %5.2f\n", name,
                    ours.ops_per_s, ours.p50_us, ours.p99_us, raw.ops_per_s, raw.p50_us, raw.p99_us,
                    ours.ops_per_s / raw.ops_per_s);
    }
}

} // namespace

int main(int argc, char** argv) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    std::string daemon = "build/daemon/pt2cached";
    double seconds = 2.0;
    std::vector<std::string> settings;
    std::string rows = "all";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (std::string(argv[i]) == "--daemon") {
            daemon = argv[i + 1];
        } else if (std::string(argv[i]) == "--seconds") {
            seconds = std::stod(argv[i + 1]);
        } else if (std::string(argv[i]) == "--rows") {
            rows = argv[i + 1]; // "all", or "get-hot": only the GET 1 KiB hot rows
        } else if (std::string(argv[i]) == "--set") {
            settings.emplace_back(argv[i + 1]);
        }
    }
    char tmpl[] = "/tmp/p2b-XXXXXX";
    const fs::path root = ::mkdtemp(tmpl);
    const std::string socket = root / "s";

    // Start the daemon and time exec -> first accepted connection.
    const auto started = Clock::now();
    const pid_t pid = ::fork();
    if (pid == 0) {
        const std::string cache_dir = root / "cache";
        std::vector<const char*> args = {daemon.c_str(), "--socket",        socket.c_str(),
                                         "--cache-dir",  cache_dir.c_str(), "--log-level",
                                         "warn"};
        for (const std::string& setting : settings) {
            args.push_back("--set");
            args.push_back(setting.c_str());
        }
        args.push_back(nullptr);
        ::execv(daemon.c_str(), const_cast<char* const*>(args.data()));
        std::perror("exec pt2cached");
        _exit(127);
    }
    double ready_ms = -1;
    for (int i = 0; i < 20000; ++i) {
        const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
        sockaddr_un address{};
        address.sun_family = AF_UNIX;
        std::strncpy(address.sun_path, socket.c_str(), sizeof address.sun_path - 1);
        const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0;
        ::close(fd);
        if (ok) {
            ready_ms = std::chrono::duration<double, std::milli>(Clock::now() - started).count();
            break;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    if (ready_ms < 0) {
        std::fprintf(stderr, "pt2cached did not start\n");
        return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const long idle_rss = rss_kib(pid);

    auto client_for = [&](int) {
        pt2cache::client::Options options;
        options.socket_path = socket;
        return std::make_shared<pt2cache::client::Client>(options);
    };
    const std::vector<std::byte> small(1024, std::byte{'v'});
    const std::vector<std::byte> large(16u << 20, std::byte{'L'});
    {
        auto c = client_for(0);
        if (!c->put("bench", "hot-1k", small) || !c->put("bench", "hot-16m", large)) {
            std::fprintf(stderr, "setup puts failed\n");
            return 1;
        }
    }
    // Request and reply sizes on the wire, as the native protocol sends them.
    const std::size_t get_request = 12 + 1 + 5 + 2 + 6;
    const std::size_t put_request = 12 + 1 + 5 + 2 + 6 + 8 + 1024;

    std::printf("pt2cached native protocol vs raw Unix-socket ping-pong, %.1f s per row, "
                "%u cores\n",
                seconds, std::thread::hardware_concurrency());
    std::printf("%-26s %16s %8s %8s | %16s %8s %8s | %5s\n", "workload", "pt2cached", "p50 us",
                "p99 us", "raw socket", "p50 us", "p99 us", "ratio");

    for (int clients : {1, 16}) {
        const auto cpu_before = cpu_ns(pid);
        auto ours = measure(clients, seconds, 1024, [&](int i) {
            auto c = client_for(i);
            return std::function<void()>([c] {
                auto got = c->get("bench", "hot-1k");
                if (!got || !*got || (*got)->size() != 1024) {
                    std::fprintf(stderr, "GET failed\n");
                    std::exit(1);
                }
            });
        });
        const auto cpu_after = cpu_ns(pid);
        PingPongServer raw_server(root / "raw", get_request, 12 + 1024);
        auto raw = measure(clients, seconds, 1024, [&](int) { return raw_server.client_op(); });
        const std::string name =
            "GET 1 KiB hot, " + std::to_string(clients) + " client" + (clients > 1 ? "s" : "");
        row(name.c_str(), ours, raw);
        std::printf("%-26s %10.2f µs of daemon CPU per GET\n", "",
                    static_cast<double>(cpu_after - cpu_before) / 1e3 /
                        static_cast<double>(std::max<std::size_t>(1, ours.ops)));
    }
    if (rows == "get-hot") {
        ::kill(pid, SIGTERM);
        ::waitpid(pid, nullptr, 0);
        fs::remove_all(root);
        return 0;
    }
    {
        std::atomic<std::uint64_t> n{0};
        auto ours = measure(1, seconds, 1024, [&](int i) {
            auto c = client_for(i);
            return std::function<void()>([c, &n, &small] {
                if (!c->put("bench", "put-" + std::to_string(n++ % 4096), small)) {
                    std::fprintf(stderr, "PUT failed\n");
                    std::exit(1);
                }
            });
        });
        PingPongServer raw_server(root / "raw", put_request, 12);
        auto raw = measure(1, seconds, 1024, [&](int) { return raw_server.client_op(); });
        row("PUT 1 KiB, 1 client", ours, raw);
    }
    {
        auto ours = measure(1, seconds, large.size(), [&](int i) {
            auto c = client_for(i);
            return std::function<void()>([c, &large] {
                auto got = c->get("bench", "hot-16m");
                if (!got || !*got || (*got)->size() != large.size()) {
                    std::fprintf(stderr, "GET 16 MiB failed\n");
                    std::exit(1);
                }
            });
        });
        PingPongServer raw_server(root / "raw", get_request, 12 + large.size());
        auto raw = measure(1, seconds, large.size(), [&](int) { return raw_server.client_op(); });
        row("GET 16 MiB, 1 client", ours, raw, true);
    }
    const long busy_rss = rss_kib(pid);
    std::printf("\npt2cached: exec to ready %.1f ms; idle RSS %.1f MiB (after the run %.1f MiB, "
                "holding 16 MiB + 4 MiB of values in memory)\n",
                ready_ms, idle_rss / 1024.0, busy_rss / 1024.0);

    ::kill(pid, SIGTERM);
    int status = 0;
    ::waitpid(pid, &status, 0);
    fs::remove_all(root);
    return 0;
}
