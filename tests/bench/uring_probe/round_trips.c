// Round trips through a FUSE mount (tests/bench/uring_probe/uring_probe.sh): a stat of one
// file and a 64 KiB create/write/close/rename, microseconds each.
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e6+t.tv_nsec/1e3;}
int main(int argc,char**argv){
  const char*dir=argv[1]; int n=atoi(argv[2]);
  static char buf[65536]; memset(buf,7,sizeof buf);
  char p[512],q[512]; struct stat st;
  snprintf(p,sizeof p,"%s/statme",dir); int fd=open(p,O_CREAT|O_WRONLY,0600); close(fd);
  double t0=now(); for(int i=0;i<n;i++) stat(p,&st); double t1=now();
  for(int i=0;i<n;i++){snprintf(p,sizeof p,"%s/b%d.part",dir,i);snprintf(q,sizeof q,"%s/b%d",dir,i);
    fd=open(p,O_CREAT|O_EXCL|O_WRONLY,0600); if(fd<0){perror("open");return 1;}
    if(write(fd,buf,sizeof buf)!=sizeof buf){perror("write");return 1;} close(fd); rename(p,q);}
  double t2=now();
  for(int i=0;i<n;i++){snprintf(q,sizeof q,"%s/b%d",dir,i);unlink(q);}
  printf("stat %.1f us  commit64k %.1f us\n",(t1-t0)/n,(t2-t1)/n);
}
