// A stand-in kubelet for gpubind-device-plugin's program (the e2e suite and
// the benchmark): the kubelet's Registration service on <dir>/kubelet.sock,
// recording each registration, and the plugin's program started against it
// (its stderr kept in a file), stopped with SIGTERM as a DaemonSet stops it.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "deviceplugin.grpc.pb.h"

namespace gpubind::test {

class StandInKubelet final : public ::v1beta1::Registration::Service {
  public:
    explicit StandInKubelet(const std::filesystem::path& dir) {
        grpc::ServerBuilder b;
        b.AddListeningPort("unix:" + (dir / "kubelet.sock").string(),
                           grpc::InsecureServerCredentials());
        b.RegisterService(this);
        server_ = b.BuildAndStart();
    }
    ~StandInKubelet() override {
        if (server_)
            server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(200));
    }
    StandInKubelet(const StandInKubelet&) = delete;
    StandInKubelet& operator=(const StandInKubelet&) = delete;

    grpc::Status Register(grpc::ServerContext*, const ::v1beta1::RegisterRequest* r,
                          ::v1beta1::Empty*) override {
        std::lock_guard lock(mu_);
        requests_.push_back(*r);
        cv_.notify_all();
        return grpc::Status::OK;
    }
    // The first registration, waiting for it up to `limit`.
    std::optional<::v1beta1::RegisterRequest> wait(std::chrono::milliseconds limit) {
        std::unique_lock lock(mu_);
        if (!cv_.wait_for(lock, limit, [&] { return !requests_.empty(); })) return {};
        return requests_.front();
    }

  private:
    std::mutex mu_;
    std::condition_variable cv_;
    std::vector<::v1beta1::RegisterRequest> requests_;
    std::unique_ptr<grpc::Server> server_;
};

// gpubind-device-plugin run as `<program> --config <config>`, its stdout and
// stderr in `log`; killed if still running when it goes.
class PluginProcess {
  public:
    PluginProcess(const std::string& program, const std::filesystem::path& config,
                  std::filesystem::path log)
        : log_(std::move(log)) {
        pid_ = ::fork();
        if (pid_ == 0) {
            const int fd = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
            if (fd < 0) ::_exit(126);
            ::dup2(fd, 1);
            ::dup2(fd, 2);
            ::execl(program.c_str(), program.c_str(), "--config", config.c_str(),
                    static_cast<char*>(nullptr));
            ::_exit(127);
        }
    }
    ~PluginProcess() {
        if (pid_ > 0) {
            ::kill(pid_, SIGKILL);
            ::waitpid(pid_, nullptr, 0);
        }
    }
    PluginProcess(const PluginProcess&) = delete;
    PluginProcess& operator=(const PluginProcess&) = delete;

    pid_t pid() const { return pid_; }
    // SIGTERM, then its exit status (128 + signal when killed by one).
    int stop() {
        if (pid_ <= 0) return -1;
        ::kill(pid_, SIGTERM);
        int st = 0;
        ::waitpid(pid_, &st, 0);
        pid_ = -1;
        return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
    // What it wrote so far.
    std::string output() const {
        std::ifstream in(log_);
        return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    }

  private:
    std::filesystem::path log_;
    pid_t pid_ = -1;
};

}  // namespace gpubind::test
