//! The gRPC surface of a server started in-process on loopback: the health service answers
//! without a token; every other call needs the right one.

use hetsched_proto as pb;
use hetsched_proto::client_client::ClientClient;
use hetsched_server::ServerConfig;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};

#[tokio::test]
async fn health_is_open_and_everything_else_needs_the_token() {
    let dir = std::env::temp_dir().join(format!("hetsched-service-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let server = hetsched_server::start(ServerConfig {
        listen: "127.0.0.1:0".parse().expect("addr"),
        data_dir: dir.clone(),
        ..Default::default()
    })
    .await
    .expect("server starts");
    let url = format!("http://{}", server.addr);
    let channel = pb::endpoint(&url, None)
        .expect("endpoint")
        .connect()
        .await
        .expect("connect");

    let health = HealthClient::new(channel.clone())
        .check(HealthCheckRequest {
            service: "hetsched.v1.Client".into(),
        })
        .await
        .expect("health answers without a token")
        .into_inner();
    assert_eq!(health.status, ServingStatus::Serving as i32);

    let err = ClientClient::new(channel.clone())
        .list_jobs(pb::ListJobsRequest::default())
        .await
        .expect_err("no token");
    assert_eq!(err.code(), tonic::Code::Unauthenticated);

    let wrong = pb::TokenInterceptor::new("not-the-token").expect("ascii");
    let err = ClientClient::with_interceptor(channel.clone(), wrong)
        .list_jobs(pb::ListJobsRequest::default())
        .await
        .expect_err("wrong token");
    assert_eq!(err.code(), tonic::Code::Unauthenticated);

    let right = pb::TokenInterceptor::new(&server.token).expect("ascii");
    let jobs = ClientClient::with_interceptor(channel, right)
        .list_jobs(pb::ListJobsRequest::default())
        .await
        .expect("the right token is accepted")
        .into_inner();
    assert!(jobs.jobs.is_empty());
    let on_disk = std::fs::read_to_string(hetsched_server::token_path(&dir)).expect("token file");
    assert_eq!(on_disk.trim(), server.token);
    server.stop().await.expect("stops");
    let _ = std::fs::remove_dir_all(&dir);
}
